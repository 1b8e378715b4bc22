data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  tags        = merge(var.tags, { "ci-autoscaler:component" = "controller" })
  cluster_arn = var.cluster_arn != null ? var.cluster_arn : aws_ecs_cluster.this[0].arn
  config_dir  = "/etc/ci-autoscaler"
  state_dir   = "/var/lib/ci-autoscaler"

  # An image in ECR (ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO[:tag|@digest]): its
  # repository's ARN, the only one the execution role may pull from.
  ecr_image          = try(regex("^([0-9]{12})\\.dkr\\.ecr\\.([a-z0-9-]+)\\.amazonaws\\.com(?:\\.cn)?/([^:@]+)", var.image), null)
  ecr_repository_arn = local.ecr_image == null ? null : "arn:${data.aws_partition.current.partition}:ecr:${local.ecr_image[1]}:${local.ecr_image[0]}:repository/${local.ecr_image[2]}"

  # Environment variable name => secret ARN, for the controller and for the init step.
  controller_secrets = merge(
    var.github_token_secret_arn == null ? {} : { GITHUB_TOKEN = var.github_token_secret_arn },
    var.webhook_secret_arn == null ? {} : { GITHUB_WEBHOOK_SECRET = var.webhook_secret_arn },
    var.extra_secrets,
  )
  init_secrets = merge(
    { CI_AUTOSCALER_CONFIG = aws_ssm_parameter.config.arn },
    var.github_app_private_key_secret_arn == null ? {} : { GITHUB_APP_PRIVATE_KEY = var.github_app_private_key_secret_arn },
  )
  secret_arns = distinct(concat(values(local.controller_secrets), values(local.init_secrets)))
  ssm_arns    = [for a in local.secret_arns : a if can(regex("^arn:[^:]+:ssm:", a))]
  sm_arns     = [for a in local.secret_arns : a if can(regex("^arn:[^:]+:secretsmanager:", a))]

  # The root filesystem is read-only: a short init container writes the config (and the
  # App key) from the secrets into a task volume the controller mounts read-only.
  init_script = <<-PY
    import os, pathlib
    d = pathlib.Path("${local.config_dir}")
    (d / "config.yaml").write_text(os.environ["CI_AUTOSCALER_CONFIG"])
    key = os.environ.get("GITHUB_APP_PRIVATE_KEY")
    if key:
        p = d / "github-app.pem"
        p.write_text(key)
        p.chmod(0o600)
  PY

  health_command = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${var.metrics_port}/healthz', timeout=4)"

  # Two controllers need the DynamoDB state table and its leader lease; without it a
  # second task would be a second writer (both would scale and page).
  high_availability = var.state_table_name != null
  config_state      = try(yamldecode(var.config_yaml).state, {})

  log_options = {
    awslogs-group         = aws_cloudwatch_log_group.this.name
    awslogs-region        = data.aws_region.current.name
    awslogs-stream-prefix = var.name
  }
}

# ------------------------------------------------------------------ config and logs

resource "aws_ssm_parameter" "config" {
  #checkov:skip=CKV2_AWS_34:config.yaml holds no secret: credentials reach the task as secrets and the config names them (${GITHUB_TOKEN})
  #checkov:skip=CKV_AWS_337:no secret in it (see CKV2_AWS_34)
  name        = "/${var.name}/config.yaml"
  description = "ci-autoscaler configuration (no secrets; they come from the task's secrets)"
  type        = "String"
  tier        = length(var.config_yaml) > 4096 ? "Advanced" : "Standard"
  value       = var.config_yaml
  tags        = local.tags
}

resource "aws_cloudwatch_log_group" "this" {
  #checkov:skip=CKV_AWS_158:the controller's logs carry no secret (a filter redacts every credential's value) and CloudWatch Logs encrypts them at rest by default
  #checkov:skip=CKV_AWS_338:operational logs: log_retention_days (default 30) is the operator's choice, not a compliance archive
  name              = "/ecs/${var.name}"
  retention_in_days = var.log_retention_days
  tags              = local.tags
}

# ------------------------------------------------------------------ IAM

data "aws_iam_policy_document" "assume_ecs_tasks" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${data.aws_partition.current.partition}:ecs:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:*"]
    }
  }
}

# The task role: exactly the calls autoscaler/pools/aws_asg.py makes (IAM_ACTIONS; a test
# keeps the two in step). Describe* takes no resource conditions; every mutating call is
# limited to groups tagged ci-autoscaler:managed=true (the runner-pool module's groups).
data "aws_iam_policy_document" "task" {
  statement {
    sid = "DescribePools"
    actions = [
      "autoscaling:DescribeAutoScalingGroups",
      "autoscaling:DescribeScalingActivities",
      "autoscaling:DescribeWarmPool",
      "ec2:DescribeInstances",
    ]
    resources = ["*"]
  }

  statement {
    sid = "ScaleManagedPools"
    actions = [
      "autoscaling:DeleteWarmPool",
      "autoscaling:PutWarmPool",
      "autoscaling:SetDesiredCapacity",
      "autoscaling:SetInstanceProtection",
      "autoscaling:TerminateInstanceInAutoScalingGroup",
    ]
    resources = ["arn:${data.aws_partition.current.partition}:autoscaling:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:autoScalingGroup:*:autoScalingGroupName/*"]
    condition {
      test     = "StringEquals"
      variable = "autoscaling:ResourceTag/ci-autoscaler:managed"
      values   = ["true"]
    }
  }

  # Every instance's runner credential (a JIT config, or a registration token), under its
  # own parameter path only (autoscaler/scale/aws/ssm.py IAM_ACTIONS).
  statement {
    sid = "JitParameters"
    actions = [
      "ssm:AddTagsToResource",
      "ssm:DeleteParameter",
      "ssm:PutParameter",
    ]
    resources = [
      "arn:${data.aws_partition.current.partition}:ssm:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:parameter${var.jit_parameter_path}",
      "arn:${data.aws_partition.current.partition}:ssm:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:parameter${var.jit_parameter_path}/*",
    ]
  }

  # Finding parameters a stop left behind: names and metadata only, never a value. AWS
  # does not scope DescribeParameters to a resource (IAM_LIST_ACTION).
  statement {
    sid       = "ListParameterNames"
    actions   = ["ssm:DescribeParameters"]
    resources = ["*"] #checkov:skip=CKV_AWS_356:DescribeParameters supports no resource-level permission; it returns names and metadata, no value
  }

  # With interruption_queue: read and delete on that one queue (interruptions.tf), exactly
  # the calls autoscaler/scale/aws/sqs.py makes (SQS_IAM_ACTIONS; a test keeps them in step).
  dynamic "statement" {
    for_each = aws_sqs_queue.interruptions
    content {
      sid       = "ReadInterruptionQueue"
      actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage"]
      resources = [statement.value.arn]
    }
  }

  # The state table's calls (autoscaler/state/dynamodb_table.py IAM_ACTIONS), on that table
  # only: TransactWriteItems is authorised per action as PutItem, UpdateItem, DeleteItem
  # and ConditionCheckItem.
  dynamic "statement" {
    for_each = aws_dynamodb_table.state
    content {
      sid = "StateTable"
      actions = [
        "dynamodb:ConditionCheckItem",
        "dynamodb:DeleteItem",
        "dynamodb:DescribeTable",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:UpdateItem",
      ]
      resources = [statement.value.arn]
    }
  }
}

# ------------------------------------------------------------------ state table

# What must survive a failover (alert states, the outbox, back-offs, the ETag cache) and the
# leader lease. Exactly the schema `ci-autoscaler state create-table` creates
# (autoscaler/state/dynamodb_table.py; tests/e2e/test_terraform.py compares the two).
resource "aws_dynamodb_table" "state" {
  #checkov:skip=CKV_AWS_119:holds alert states, ledgers and ETags, no credential (the handover ledger keeps no credential value); DynamoDB encrypts at rest by default
  count        = local.high_availability ? 1 : 0
  name         = var.state_table_name
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"
  range_key    = "sk"
  tags         = local.tags

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }
}

resource "aws_iam_role" "task" {
  name_prefix        = "${var.name}-task-"
  description        = "ci-autoscaler controller: scale the managed runner pools"
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "task" {
  name   = "scale-managed-pools"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task.json
}

# The execution role: pull the image, write logs, read the config and the secrets. Inline
# rather than AmazonECSTaskExecutionRolePolicy, so logs are scoped to this log group.
data "aws_iam_policy_document" "execution" {
  statement {
    sid       = "EcrLogin"
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"] #checkov:skip=CKV_AWS_356:GetAuthorizationToken supports no resource-level permission
  }

  # Pulling the image: its own ECR repository only (none for an image from another
  # registry, which ECS pulls without IAM).
  dynamic "statement" {
    for_each = local.ecr_repository_arn == null ? [] : [local.ecr_repository_arn]
    content {
      sid       = "PullImage"
      actions   = ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]
      resources = [statement.value]
    }
  }

  statement {
    sid       = "WriteLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.this.arn}:*"]
  }

  statement {
    sid       = "ReadConfig"
    actions   = ["ssm:GetParameters"]
    resources = concat([aws_ssm_parameter.config.arn], local.ssm_arns)
  }

  dynamic "statement" {
    for_each = length(local.sm_arns) > 0 ? [local.sm_arns] : []
    content {
      sid       = "ReadSecrets"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = statement.value
    }
  }

  dynamic "statement" {
    for_each = length(var.kms_key_arns) > 0 ? [var.kms_key_arns] : []
    content {
      sid       = "DecryptSecrets"
      actions   = ["kms:Decrypt"]
      resources = statement.value
    }
  }
}

resource "aws_iam_role" "execution" {
  name_prefix        = "${var.name}-exec-"
  description        = "ci-autoscaler controller: ECS task execution"
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "execution" {
  name   = "read-config-and-secrets"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}

# ------------------------------------------------------------------ network

resource "aws_security_group" "this" {
  name_prefix = "${var.name}-"
  description = "ci-autoscaler controller: metrics port from the given CIDRs only"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = var.name })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "metrics" {
  for_each          = toset(var.metrics_ingress_cidrs)
  security_group_id = aws_security_group.this.id
  description       = "Prometheus scrape of /metrics"
  ip_protocol       = "tcp"
  from_port         = var.metrics_port
  to_port           = var.metrics_port
  cidr_ipv4         = strcontains(each.value, ":") ? null : each.value
  cidr_ipv6         = strcontains(each.value, ":") ? each.value : null
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "https" {
  security_group_id = aws_security_group.this.id
  description       = "GitHub, AWS APIs and alert receivers"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

# Receivers that are not HTTPS on 443 (an Alertmanager in the VPC on http://...:9093, a
# webhook on another port): one rule per CIDR and port, nothing when none are given.
resource "aws_vpc_security_group_egress_rule" "receivers" {
  for_each = {
    for pair in setproduct(var.receiver_egress_cidrs, var.receiver_egress_ports) :
    "${pair[0]}:${pair[1]}" => { cidr = pair[0], port = pair[1] }
  }
  security_group_id = aws_security_group.this.id
  description       = "alert receivers (receiver_egress_cidrs)"
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = each.value.cidr
  tags              = local.tags
}

# ------------------------------------------------------------------ ECS

resource "aws_ecs_cluster" "this" {
  count = var.cluster_arn == null ? 1 : 0
  name  = var.name
  tags  = local.tags

  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_ecs_task_definition" "this" {
  family                   = var.name
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory
  task_role_arn            = aws_iam_role.task.arn
  execution_role_arn       = aws_iam_role.execution.arn
  tags                     = local.tags

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  volume {
    name = "config"
  }

  volume {
    name = "state"
  }

  container_definitions = jsonencode([
    {
      name                   = "config"
      image                  = var.image
      essential              = false
      user                   = "10001:10001"
      readonlyRootFilesystem = true
      entryPoint             = ["python", "-c"]
      command                = [local.init_script]
      secrets                = [for k, v in local.init_secrets : { name = k, valueFrom = v }]
      mountPoints            = [{ sourceVolume = "config", containerPath = local.config_dir, readOnly = false }]
      logConfiguration       = { logDriver = "awslogs", options = local.log_options }
    },
    {
      name                   = "controller"
      image                  = var.image
      essential              = true
      user                   = "10001:10001"
      readonlyRootFilesystem = true
      command                = ["run", "--config", "${local.config_dir}/config.yaml"]
      secrets                = [for k, v in local.controller_secrets : { name = k, valueFrom = v }]
      environment = concat(
        [{ name = "AWS_DEFAULT_REGION", value = data.aws_region.current.name }],
        [for q in aws_sqs_queue.interruptions : { name = "INTERRUPTION_QUEUE_URL", value = q.url }],
      )
      portMappings = concat(
        [{ containerPort = var.metrics_port, protocol = "tcp", name = "metrics" }],
        var.webhook_secret_arn == null ? [] : [{ containerPort = var.webhook_port, protocol = "tcp", name = "webhook" }],
      )
      dependsOn       = [{ containerName = "config", condition = "SUCCESS" }]
      stopTimeout     = 30
      linuxParameters = { initProcessEnabled = true }
      mountPoints = [
        { sourceVolume = "config", containerPath = local.config_dir, readOnly = true },
        { sourceVolume = "state", containerPath = local.state_dir, readOnly = false },
      ]
      healthCheck = {
        command     = ["CMD", "python", "-c", local.health_command]
        interval    = 30
        timeout     = 5
        retries     = 3
        startPeriod = 60
      }
      logConfiguration = { logDriver = "awslogs", options = local.log_options }
      dockerLabels = {
        "prometheus.io/scrape" = "true"
        "prometheus.io/port"   = tostring(var.metrics_port)
        "prometheus.io/path"   = "/metrics"
      }
    },
  ])
}

resource "aws_service_discovery_service" "this" {
  count = var.service_discovery_namespace_id == null ? 0 : 1
  name  = var.name
  tags  = local.tags

  dns_config {
    namespace_id   = var.service_discovery_namespace_id
    routing_policy = "MULTIVALUE"
    dns_records {
      type = "A"
      ttl  = 10
    }
  }
}

resource "aws_ecs_service" "this" {
  name            = var.name
  cluster         = local.cluster_arn
  task_definition = aws_ecs_task_definition.this.arn
  launch_type     = "FARGATE"
  desired_count   = local.high_availability ? 2 : 1
  propagate_tags  = "SERVICE"
  tags            = local.tags

  # With the state table: two controllers, one leading (the lease), and rolling deploys
  # that start the new tasks before stopping the old (the old leader releases the lease
  # when it stops, a follower takes over at once). Without it: exactly one controller,
  # never started before the old one stopped, or two would scale the same pools.
  deployment_minimum_healthy_percent = local.high_availability ? 100 : 0
  deployment_maximum_percent         = local.high_availability ? 200 : 100

  lifecycle {
    precondition {
      condition = (
        local.high_availability
        ? try(local.config_state.backend, "sqlite") == "dynamodb" && try(local.config_state.table, "") == var.state_table_name
        : try(local.config_state.backend, "sqlite") != "dynamodb"
      )
      error_message = "state_table_name and the config's state section must agree: with state_table_name set, config_yaml needs `state: {backend: dynamodb, table: <state_table_name>}` (two tasks on SQLite would both scale); without it, `state.backend` must not be dynamodb."
    }
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.this.id]
    assign_public_ip = var.assign_public_ip
  }

  dynamic "load_balancer" {
    for_each = aws_lb_target_group.webhook
    content {
      target_group_arn = load_balancer.value.arn
      container_name   = "controller"
      container_port   = var.webhook_port
    }
  }

  dynamic "service_registries" {
    for_each = aws_service_discovery_service.this
    content {
      registry_arn = service_registries.value.arn
    }
  }
}
