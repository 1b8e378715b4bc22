output "pools" {
  description = "Runner type => Auto Scaling group name."
  value = {
    (module.cpu_pool.runner_type) = module.cpu_pool.asg_name
    (module.gpu_pool.runner_type) = module.gpu_pool.asg_name
  }
}

output "controller_service" {
  description = "ECS service of the controller."
  value       = module.controller.service_name
}

output "controller_log_group" {
  description = "Where the controller logs."
  value       = module.controller.log_group_name
}

output "controller_config" {
  description = "The generated controller config (no secrets in it)."
  value       = yamldecode(yamlencode(local.config))
}

output "webhook_url" {
  description = "Point the organization's (or the GitHub App's) webhook here, with only Workflow jobs events; null without a webhook entry."
  value       = module.controller.webhook_url
}
