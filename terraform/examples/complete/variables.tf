variable "region" {
  description = "AWS region of the pools and the controller."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "region must be an AWS region such as us-east-1."
  }
}

variable "github_owner" {
  description = "GitHub organization whose queues are watched and whose runners register."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9-]{0,38}$", var.github_owner))
    error_message = "github_owner must be a GitHub organization name."
  }
}

variable "github_repos" {
  description = "Repositories to watch; null watches every repository of the organization."
  type        = list(string)
  default     = null
}

variable "github_token_secret_arn" {
  description = "ARN of the SSM SecureString parameter or Secrets Manager secret holding the controller's GitHub token."
  type        = string
}

variable "jit_parameter_path" {
  description = "SSM path of every instance's runner credential (the GPU pool's just-in-time configs, the CPU pool's registration tokens): the controller writes <path>/<pool>/<instance id>, each instance reads its own."
  type        = string
  default     = "/ci-autoscaler/jit"
}

variable "image" {
  description = "The controller image you pushed, e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/ci-autoscaler:0.1.0."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the controller."
  type        = string
}

variable "controller_subnet_ids" {
  description = "Private subnets of the controller task."
  type        = list(string)
}

variable "runner_subnet_ids" {
  description = "Subnets of the runner instances (several AZs)."
  type        = list(string)
}

variable "runner_security_group_ids" {
  description = "Security groups of the runner instances (outbound HTTPS, no inbound)."
  type        = list(string)
  default     = []
}

variable "cpu_ami_id" {
  description = "AMI of the CPU runners."
  type        = string
}

variable "gpu_ami_id" {
  description = "AMI of the GPU runners (with the NVIDIA driver)."
  type        = string
}

variable "metrics_ingress_cidrs" {
  description = "CIDRs of your Prometheus servers."
  type        = list(string)
}

variable "service_discovery_namespace_id" {
  description = "Cloud Map private DNS namespace for Prometheus' dns_sd_configs (optional)."
  type        = string
  default     = null
}

variable "alert_webhook_secret_arn" {
  description = "Optional: SSM parameter or Secrets Manager secret holding a Slack incoming-webhook URL for alerts."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  default     = { "team" = "dev-infra" }
}

variable "webhook_secret_arn" {
  description = "SSM SecureString parameter or Secrets Manager secret holding the GitHub webhook secret; null: no webhooks (polling alone)."
  type        = string
  default     = null
}

variable "webhook_certificate_arn" {
  description = "ACM certificate for the public HTTPS webhook entry (POST /github/webhook only); null: none."
  type        = string
  default     = null
}

variable "webhook_public_subnet_ids" {
  description = "Public subnets (two AZs or more) of the webhook ALB."
  type        = list(string)
  default     = []
}

variable "receiver_egress_cidrs" {
  description = "Where the controller may reach alert receivers besides HTTPS anywhere (an in-VPC Alertmanager on http://alertmanager:9093, say): CIDRs allowed on receiver_egress_ports."
  type        = list(string)
  default     = []
}

variable "receiver_egress_ports" {
  description = "TCP ports the controller may reach receiver_egress_cidrs on (Alertmanager: 9093)."
  type        = list(number)
  default     = [9093]
}
