# One CPU pool, one GPU pool (spot first, on-demand base), and the controller that scales
# them. The controller config is generated from the pools, so names cannot drift. The GPU
# pool runs ephemeral runners registered just in time (mode: ephemeral, what new pools
# should use); the CPU pool registers its own runners (mode: persistent) with the one-hour
# registration token the controller hands each instance. No GitHub credential that lasts
# reaches any machine.

module "cpu_pool" {
  source = "../../modules/runner-pool"

  pool_name           = "ci-cpu"
  runner_type         = "linux.4xlarge"
  labels              = ["self-hosted", "linux.4xlarge"]
  github_url          = "https://github.com/${var.github_owner}"
  mode                = "persistent"
  jit_parameter_path  = var.jit_parameter_path
  ami_id              = var.cpu_ami_id
  instance_types      = ["c6i.4xlarge", "c6a.4xlarge", "c5.4xlarge"]
  root_volume_size_gb = 150
  subnet_ids          = var.runner_subnet_ids
  security_group_ids  = var.runner_security_group_ids
  max_size            = 100
}

module "gpu_pool" {
  source = "../../modules/runner-pool"

  pool_name           = "ci-gpu"
  runner_type         = "linux.g5.4xlarge.nvidia.gpu"
  labels              = ["self-hosted", "linux.g5.4xlarge.nvidia.gpu"]
  github_url          = "https://github.com/${var.github_owner}"
  mode                = "ephemeral"
  jit_parameter_path  = var.jit_parameter_path
  ami_id              = var.gpu_ami_id
  instance_types      = ["g5.4xlarge"]
  root_volume_size_gb = 300
  subnet_ids          = var.runner_subnet_ids
  security_group_ids  = var.runner_security_group_ids
  max_size            = 40

  spot = {
    on_demand_base_capacity                  = 2
    on_demand_percentage_above_base_capacity = 25
  }
}

locals {
  state_table = "ci-autoscaler-state"

  receivers = var.alert_webhook_secret_arn == null ? {} : {
    slack = { type = "slack", url = "$${SLACK_WEBHOOK_URL}" }
  }

  # workflow_job webhooks (only with webhook_secret_arn): react at once, poll to reconcile
  webhook = var.webhook_secret_arn == null ? {} : {
    webhook = {
      listen             = "0.0.0.0:9465"
      secret             = "$${GITHUB_WEBHOOK_SECRET}"
      reconcile_interval = "5m"
    }
  }

  config = merge(local.webhook, {
    poll_interval = "30s"
    listen        = "0.0.0.0:9464"
    log_level     = "info"
    github = merge(
      { owner = var.github_owner, token = "$${GITHUB_TOKEN}" },
      var.github_repos == null ? {} : { repos = var.github_repos },
    )
    runner_types = {
      (module.cpu_pool.runner_type) = {
        labels       = module.cpu_pool.labels
        pools        = [module.cpu_pool.asg_name]
        mode         = "persistent"
        min_idle     = 2
        max          = 100
        idle_timeout = "10m"
        boot_timeout = "15m"
      }
      (module.gpu_pool.runner_type) = {
        labels       = module.gpu_pool.labels
        pools        = [module.gpu_pool.asg_name]
        mode         = "ephemeral"
        min_idle     = 1
        max          = 40
        priority     = 10
        idle_timeout = "10m"
        boot_timeout = "15m"
      }
    }
    jit = { parameter_path = var.jit_parameter_path }
    # The controller module's interruption queue (its URL reaches the task as a variable).
    aws = { region = var.region, interruption_queue_url = "$${INTERRUPTION_QUEUE_URL}" }
    # Two controllers share this table; one holds the lease and acts (docs/two-controllers.md).
    state = { backend = "dynamodb", table = local.state_table, lease_duration = "30s" }
    alerts = {
      receivers = local.receivers
      rules = length(local.receivers) == 0 ? [] : [
        {
          name            = "Jobs queueing"
          team            = "dev-infra"
          priority        = "P2"
          description     = "Jobs wait too long for a self-hosted runner"
          runner_types    = ["*"]
          per_runner_type = true
          max_queue_time  = "30m"
          "for"           = "5m" # quoted: checkov's HCL parser reads a bare for as a loop
          receivers       = keys(local.receivers)
        },
      ]
    }
  })
}

module "controller" {
  source = "../../modules/controller"

  name                           = "ci-autoscaler"
  image                          = var.image
  config_yaml                    = yamlencode(local.config)
  jit_parameter_path             = var.jit_parameter_path
  state_table_name               = local.state_table
  github_token_secret_arn        = var.github_token_secret_arn
  extra_secrets                  = var.alert_webhook_secret_arn == null ? {} : { SLACK_WEBHOOK_URL = var.alert_webhook_secret_arn }
  vpc_id                         = var.vpc_id
  subnet_ids                     = var.controller_subnet_ids
  metrics_ingress_cidrs          = var.metrics_ingress_cidrs
  service_discovery_namespace_id = var.service_discovery_namespace_id
  interruption_queue             = true
  managed_group_names            = [module.cpu_pool.asg_name, module.gpu_pool.asg_name]
  webhook_secret_arn             = var.webhook_secret_arn
  webhook_certificate_arn        = var.webhook_certificate_arn
  webhook_public_subnet_ids      = var.webhook_public_subnet_ids
  receiver_egress_cidrs          = var.receiver_egress_cidrs
  receiver_egress_ports          = var.receiver_egress_ports
}
