output "service_name" {
  description = "Name of the ECS service."
  value       = aws_ecs_service.this.name
}

output "cluster_arn" {
  description = "ARN of the ECS cluster the service runs in."
  value       = local.cluster_arn
}

output "task_role_arn" {
  description = "ARN of the task role (the controller's AWS identity)."
  value       = aws_iam_role.task.arn
}

output "task_role_policy_json" {
  description = "The task role's policy document."
  value       = data.aws_iam_policy_document.task.json
}

output "execution_role_arn" {
  description = "ARN of the task execution role."
  value       = aws_iam_role.execution.arn
}

output "security_group_id" {
  description = "Security group of the task; add it to your Prometheus' allowed sources if needed."
  value       = aws_security_group.this.id
}

output "log_group_name" {
  description = "CloudWatch log group of the controller."
  value       = aws_cloudwatch_log_group.this.name
}

output "config_parameter_name" {
  description = "SSM parameter holding config.yaml."
  value       = aws_ssm_parameter.config.name
}

output "metrics_port" {
  description = "Port of /metrics and /healthz."
  value       = var.metrics_port
}

output "service_discovery_service_arn" {
  description = "Cloud Map service the task registers in (Prometheus resolves `<name>.<namespace>` with dns_sd_configs), or null without a namespace."
  value       = one(aws_service_discovery_service.this[*].arn)
}

output "webhook_url" {
  description = "Where to point the GitHub webhook (content type application/json, only Workflow jobs events): https://<ALB or your DNS name>/github/webhook. Null without webhook_certificate_arn."
  value       = local.webhook_enabled ? "https://${aws_lb.webhook[0].dns_name}/github/webhook" : null
}

output "webhook_alb_dns_name" {
  description = "DNS name of the webhook ALB (point a CNAME matching the certificate at it), or null."
  value       = one(aws_lb.webhook[*].dns_name)
}

output "state_table_name" {
  description = "The DynamoDB state table (null without state_table_name)."
  value       = one(aws_dynamodb_table.state[*].name)
}

output "state_table_arn" {
  description = "ARN of the DynamoDB state table (null without state_table_name)."
  value       = one(aws_dynamodb_table.state[*].arn)
}
