variable "name" {
  description = "Name of the service and prefix of every resource the module creates."
  type        = string
  default     = "ci-autoscaler"

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9_-]{0,31}$", var.name))
    error_message = "name must be 1-32 characters of letters, digits, '_' or '-', starting with a letter."
  }
}

variable "image" {
  description = "The controller image, pinned: `REGISTRY/ci-autoscaler:0.1.0` or `...@sha256:...`."
  type        = string

  validation {
    condition     = can(regex("^[^\\s]+(:[A-Za-z0-9_.-]+|@sha256:[0-9a-f]{64})$", var.image)) && !endswith(var.image, ":latest")
    error_message = "image must carry an explicit tag (not latest) or a sha256 digest."
  }
}

variable "config_yaml" {
  description = "The controller's config.yaml (see config.example.yaml). Stored in an SSM parameter and written to /etc/ci-autoscaler/config.yaml when the task starts. Put no secrets in it: use `$${GITHUB_TOKEN}` and the credential variables below."
  type        = string

  validation {
    condition     = can(yamldecode(var.config_yaml)) && length(var.config_yaml) <= 8192
    error_message = "config_yaml must be valid YAML of at most 8 KiB (the Advanced SSM parameter limit)."
  }
}

variable "github_token_secret_arn" {
  description = "ARN of an SSM SecureString parameter or a Secrets Manager secret holding a GitHub token (Actions: read, organization self-hosted runners: read/write). Exposed to the controller as GITHUB_TOKEN; the config reads it as `token: $${GITHUB_TOKEN}`. Null when a GitHub App is used."
  type        = string
  default     = null

  validation {
    condition     = var.github_token_secret_arn == null || can(regex("^arn:aws[a-z-]*:(ssm|secretsmanager):[a-z0-9-]+:[0-9]{12}:(parameter/|secret:)", var.github_token_secret_arn))
    error_message = "github_token_secret_arn must be the ARN of an SSM parameter or a Secrets Manager secret."
  }
}

variable "github_app_private_key_secret_arn" {
  description = "ARN of an SSM SecureString parameter or a Secrets Manager secret holding a GitHub App's PEM private key. Written to /etc/ci-autoscaler/github-app.pem (mode 0600) at start; point `github.app.private_key_file` at it. Null when a token is used."
  type        = string
  default     = null

  validation {
    condition     = var.github_app_private_key_secret_arn == null || can(regex("^arn:aws[a-z-]*:(ssm|secretsmanager):[a-z0-9-]+:[0-9]{12}:(parameter/|secret:)", var.github_app_private_key_secret_arn))
    error_message = "github_app_private_key_secret_arn must be the ARN of an SSM parameter or a Secrets Manager secret."
  }

  validation {
    condition     = (var.github_app_private_key_secret_arn == null) != (var.github_token_secret_arn == null)
    error_message = "Set exactly one of github_token_secret_arn and github_app_private_key_secret_arn."
  }
}

variable "extra_secrets" {
  description = "More environment variables from SSM parameters or Secrets Manager secrets (name => ARN), e.g. SLACK_WEBHOOK_URL or PAGERDUTY_ROUTING_KEY referenced from the config as `$${NAME}`."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([for k, v in var.extra_secrets :
      can(regex("^[A-Z_][A-Z0-9_]*$", k)) &&
      can(regex("^arn:aws[a-z-]*:(ssm|secretsmanager):[a-z0-9-]+:[0-9]{12}:(parameter/|secret:)", v))
    ])
    error_message = "extra_secrets maps UPPER_CASE variable names to SSM parameter or Secrets Manager ARNs."
  }
}

variable "kms_key_arns" {
  description = "Customer-managed KMS keys that encrypt the secrets above (the AWS-managed keys need no grant)."
  type        = list(string)
  default     = []
}

variable "vpc_id" {
  description = "VPC of the service."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must be a VPC id (vpc-...)."
  }
}

variable "subnet_ids" {
  description = "Subnets of the task (private subnets with a NAT gateway or VPC endpoints: the controller calls GitHub and AWS)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) > 0 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids must be a non-empty list of subnet ids."
  }
}

variable "assign_public_ip" {
  description = "Give the task a public IP (only for public subnets without NAT)."
  type        = bool
  default     = false
}

variable "metrics_port" {
  description = "Port of /metrics, /healthz and /readyz; must match `listen` in the config."
  type        = number
  default     = 9464

  validation {
    condition     = var.metrics_port >= 1024 && var.metrics_port <= 65535
    error_message = "metrics_port must be between 1024 and 65535 (the container runs as non-root)."
  }
}

variable "metrics_ingress_cidrs" {
  description = "CIDRs allowed to reach the metrics port (your Prometheus). Nothing else is open."
  type        = list(string)

  validation {
    condition     = length(var.metrics_ingress_cidrs) > 0 && alltrue([for c in var.metrics_ingress_cidrs : can(cidrhost(c, 0)) && c != "0.0.0.0/0" && c != "::/0"])
    error_message = "metrics_ingress_cidrs must be a non-empty list of CIDRs, and not the whole internet."
  }
}

variable "cluster_arn" {
  description = "ECS cluster to run in; null creates one named after the service."
  type        = string
  default     = null
}

variable "cpu" {
  description = "Task CPU units (Fargate sizes)."
  type        = number
  default     = 256

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096], var.cpu)
    error_message = "cpu must be one of 256, 512, 1024, 2048, 4096."
  }
}

variable "memory" {
  description = "Task memory in MiB (a valid Fargate combination with cpu)."
  type        = number
  default     = 512

  validation {
    condition     = var.memory >= 512 && var.memory <= 30720
    error_message = "memory must be between 512 and 30720 MiB."
  }
}

variable "cpu_architecture" {
  description = "X86_64 or ARM64; the image must be built for it."
  type        = string
  default     = "X86_64"

  validation {
    condition     = contains(["X86_64", "ARM64"], var.cpu_architecture)
    error_message = "cpu_architecture must be X86_64 or ARM64."
  }
}

variable "log_retention_days" {
  description = "Retention of the CloudWatch log group."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a CloudWatch Logs retention value (1, 3, 5, 7, 14, 30, 60, 90, ...)."
  }
}

variable "service_discovery_namespace_id" {
  description = "A Cloud Map private DNS namespace; when set the task registers as `<name>.<namespace>` (A record) so Prometheus finds it with dns_sd_configs."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  default     = {}
}

variable "state_table_name" {
  description = "Name of a DynamoDB table to create for the controller's state and leader lease. Set it to run two controllers (one leads, the other takes over within the lease; rolling deploys); the config must then say `state: {backend: dynamodb, table: <this name>}`. Null: one task with SQLite on task storage (state lost when the task is replaced)."
  type        = string
  default     = null

  validation {
    condition     = var.state_table_name == null || can(regex("^[A-Za-z0-9_.-]{3,255}$", var.state_table_name))
    error_message = "state_table_name must be a DynamoDB table name: 3-255 letters, digits, '_', '-' or '.'."
  }
}

variable "jit_parameter_path" {
  description = "The config's `jit.parameter_path`: where the controller writes every instance's runner credential (a just-in-time config, or a registration token; SSM SecureStrings). Its task role may put, tag and delete parameters under this path and nowhere else (and list parameter names, which AWS does not scope)."
  type        = string
  default     = "/ci-autoscaler/jit"

  validation {
    condition     = can(regex("^(/[A-Za-z0-9_.\\-]+)+$", var.jit_parameter_path))
    error_message = "jit_parameter_path must be an SSM path such as /ci-autoscaler/jit (leading '/', no trailing '/')."
  }
}

variable "webhook_certificate_arn" {
  description = "ACM certificate ARN for the public HTTPS webhook entry (an ALB forwarding POST /github/webhook only). Null: no public entry, the controller polls alone unless you route deliveries yourself."
  type        = string
  default     = null

  validation {
    condition     = var.webhook_certificate_arn == null || can(regex("^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/", var.webhook_certificate_arn))
    error_message = "webhook_certificate_arn must be an ACM certificate ARN."
  }
}

variable "webhook_secret_arn" {
  description = "ARN of an SSM SecureString parameter or a Secrets Manager secret holding the webhook secret (the one set on the GitHub webhook). Exposed to the controller as GITHUB_WEBHOOK_SECRET; the config reads it as `webhook: {secret: $${GITHUB_WEBHOOK_SECRET}}`."
  type        = string
  default     = null

  validation {
    condition     = var.webhook_secret_arn == null || can(regex("^arn:aws[a-z-]*:(ssm|secretsmanager):[a-z0-9-]+:[0-9]{12}:(parameter/|secret:)", var.webhook_secret_arn))
    error_message = "webhook_secret_arn must be the ARN of an SSM parameter or a Secrets Manager secret."
  }

  validation {
    condition     = var.webhook_certificate_arn == null || var.webhook_secret_arn != null
    error_message = "A public webhook entry (webhook_certificate_arn) needs webhook_secret_arn: unsigned deliveries are refused."
  }
}

variable "webhook_port" {
  description = "Port of the controller's webhook listener; must match `webhook.listen` in the config. Never the metrics port."
  type        = number
  default     = 9465

  validation {
    condition     = var.webhook_port >= 1024 && var.webhook_port <= 65535 && var.webhook_port != var.metrics_port
    error_message = "webhook_port must be between 1024 and 65535 and differ from metrics_port."
  }
}

variable "webhook_public_subnet_ids" {
  description = "Public subnets (two or more AZs) of the webhook ALB; needed with webhook_certificate_arn."
  type        = list(string)
  default     = []

  validation {
    condition     = var.webhook_certificate_arn == null || length(var.webhook_public_subnet_ids) >= 2
    error_message = "The webhook ALB needs at least two public subnets in different AZs."
  }
}

variable "webhook_ingress_cidrs" {
  description = "Who may reach the webhook entry: GitHub's hook ranges (`curl https://api.github.com/meta | jq .hooks`). Every delivery is HMAC-verified, so the whole internet is a safe default, but narrower is better."
  type        = list(string)
  default     = ["0.0.0.0/0", "::/0"]

  validation {
    condition     = alltrue([for c in var.webhook_ingress_cidrs : can(cidrhost(c, 0))])
    error_message = "webhook_ingress_cidrs must be CIDRs."
  }
}

variable "receiver_egress_cidrs" {
  description = "Alert receivers the controller reaches on other ports than 443 (an Alertmanager in the VPC on http://alertmanager:9093, say): the CIDRs its security group may send to on receiver_egress_ports. Empty: HTTPS on 443 only."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.receiver_egress_cidrs : can(cidrhost(c, 0))])
    error_message = "receiver_egress_cidrs must be IPv4 CIDRs such as 10.0.0.0/16."
  }
}

variable "receiver_egress_ports" {
  description = "TCP ports the controller may reach receiver_egress_cidrs on (Alertmanager: 9093)."
  type        = list(number)
  default     = [9093]

  validation {
    condition     = alltrue([for p in var.receiver_egress_ports : p >= 1 && p <= 65535 && floor(p) == p])
    error_message = "receiver_egress_ports must be TCP ports (1-65535)."
  }
}
