output "asg_name" {
  description = "Name of the Auto Scaling group; list it under the runner type's `pools` in the controller config."
  value       = aws_autoscaling_group.pool.name
}

output "asg_arn" {
  description = "ARN of the Auto Scaling group."
  value       = aws_autoscaling_group.pool.arn
}

output "runner_type" {
  description = "The runner type this pool serves (its `ci-autoscaler:runner-type` tag)."
  value       = var.runner_type
}

output "labels" {
  description = "Labels the pool's runners register with."
  value       = var.labels
}

output "runner_name_prefix" {
  description = "Runners register as `<prefix><instance id>`."
  value       = "${var.pool_name}-"
}

output "launch_template_id" {
  description = "ID of the launch template."
  value       = aws_launch_template.runner.id
}

output "launch_template_version" {
  description = "Version of the launch template the group uses."
  value       = aws_launch_template.runner.latest_version
}

output "instance_role_arn" {
  description = "ARN of the instance role (null when an existing instance profile is used)."
  value       = var.create_instance_profile ? aws_iam_role.runner[0].arn : null
}

output "instance_profile_name" {
  description = "Instance profile the runners use."
  value       = local.instance_profile_name
}

output "user_data" {
  description = "The rendered boot script (no secrets: the token is read from SSM at boot)."
  value       = local.user_data
}
