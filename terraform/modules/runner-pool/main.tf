data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  # The controller recognises the groups it may touch by these tags (its IAM policy is
  # conditioned on the first) and maps each group to a runner type by the second.
  managed_tags = {
    "ci-autoscaler:managed"     = "true"
    "ci-autoscaler:runner-type" = var.runner_type
  }
  tags = merge(var.tags, local.managed_tags)

  # The runner adds its default labels itself; passing them again is redundant.
  default_labels = ["self-hosted", "linux", "x64", "arm64"]
  runner_labels  = [for l in var.labels : l if !contains(local.default_labels, lower(l))]

  ssm_arn_prefix = "arn:${data.aws_partition.current.partition}:ssm:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:parameter"
  jit            = var.mode == "ephemeral"
  # Each instance's credential (a JIT config, or a registration token in persistent mode),
  # written by the controller: <path>/<pool>/<instance id>.
  own_parameters_arn = "${local.ssm_arn_prefix}${var.jit_parameter_path}/${var.pool_name}/*"

  instance_profile_name = var.create_instance_profile ? aws_iam_instance_profile.runner[0].name : var.instance_profile_name

  user_data = templatefile("${path.module}/templates/user-data.sh.tftpl", {
    pool_name          = var.pool_name
    github_url         = trimsuffix(var.github_url, "/")
    jit                = local.jit
    jit_parameter_path = var.jit_parameter_path
    jit_wait           = var.jit_wait_for_termination
    runner_labels      = join(",", local.runner_labels)
    runner_group       = var.runner_group
    runner_version     = var.runner_version
    runner_sha256      = var.runner_sha256
    runner_arch        = var.runner_arch
    extra_user_data    = var.extra_user_data
    warm_pool          = var.warm_pool != null
    warm_reuse         = var.warm_pool != null && try(var.warm_pool.reuse, false)
    warm_hook          = local.warm_hook
  })

  # The launch lifecycle hook a warm pool's instances complete once their setup is done
  # (going into the warm pool, and again going in service).
  warm_hook = "ci-autoscaler-warm-setup"
  group_arn = "arn:${data.aws_partition.current.partition}:autoscaling:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:autoScalingGroup:*:autoScalingGroupName/${var.pool_name}"
}

# ------------------------------------------------------------------ instance role

data "aws_iam_policy_document" "assume_ec2" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "runner" {
  # An instance reads its own credential only, and deletes it (a persistent instance claims
  # its registration token that way). The controller tags each parameter with the instance
  # it is for; ec2:InstanceID is the id of the instance whose role credentials sign the
  # request. Nothing else: no GitHub credential, no other instance's parameter.
  statement {
    sid       = "ReadAndClaimOwnCredential"
    actions   = ["ssm:GetParameter", "ssm:DeleteParameter"]
    resources = [local.own_parameters_arn]
    condition {
      test     = "StringEquals"
      variable = "ssm:resourceTag/ci-autoscaler:instance-id"
      values   = ["$${ec2:InstanceID}"]
    }
  }

  # A warm pool's instance tells its own group that its setup is done (the lifecycle hook).
  dynamic "statement" {
    for_each = var.warm_pool == null ? [] : [local.group_arn]
    content {
      sid       = "CompleteOwnGroupLifecycleAction"
      actions   = ["autoscaling:CompleteLifecycleAction"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid       = "DecryptOwnCredential"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }
}

resource "aws_iam_role" "runner" {
  count              = var.create_instance_profile ? 1 : 0
  name_prefix        = "${substr(var.pool_name, 0, 32)}-"
  assume_role_policy = data.aws_iam_policy_document.assume_ec2.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "runner" {
  count  = var.create_instance_profile ? 1 : 0
  name   = "read-own-runner-credential"
  role   = aws_iam_role.runner[0].id
  policy = data.aws_iam_policy_document.runner.json
}

resource "aws_iam_instance_profile" "runner" {
  count       = var.create_instance_profile ? 1 : 0
  name_prefix = "${substr(var.pool_name, 0, 32)}-"
  role        = aws_iam_role.runner[0].name
  tags        = local.tags
}

# ------------------------------------------------------------------ launch template

resource "aws_launch_template" "runner" {
  name_prefix            = "${var.pool_name}-"
  description            = "ci-autoscaler runner pool ${var.pool_name} (${var.runner_type})"
  image_id               = var.ami_id
  instance_type          = var.instance_types[0]
  vpc_security_group_ids = var.security_group_ids
  user_data              = base64encode(local.user_data)
  update_default_version = true

  # An ephemeral runner powers the instance off after its one job; the group replaces it.
  instance_initiated_shutdown_behavior = "terminate"

  iam_instance_profile {
    name = local.instance_profile_name
  }

  block_device_mappings {
    device_name = var.root_device_name
    ebs {
      volume_size           = var.root_volume_size_gb
      volume_type           = var.root_volume_type
      encrypted             = true
      delete_on_termination = true
    }
  }

  # IMDSv2 only, and its answers never leave the host: a PUT's response has a TTL of one
  # hop, so a container on a bridge network (one more hop) gets no session token. The boot
  # script also rejects the runner user's packets to 169.254.169.254 (templates/).
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "enabled"
  }

  monitoring {
    enabled = true
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = var.pool_name })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(local.tags, { Name = var.pool_name })
  }

  tags = local.tags
}

# ------------------------------------------------------------------ auto scaling group

resource "aws_autoscaling_group" "pool" {
  name                      = var.pool_name
  min_size                  = var.min_size
  max_size                  = var.max_size
  desired_capacity          = var.min_size
  vpc_zone_identifier       = var.subnet_ids
  health_check_type         = "EC2"
  health_check_grace_period = var.health_check_grace_period
  suspended_processes       = var.suspended_processes
  capacity_rebalance        = var.spot == null ? false : var.spot.capacity_rebalance
  wait_for_capacity_timeout = "0"

  # The controller decides which instance goes: the group itself never picks a victim,
  # so it can never terminate a busy runner on scale-in.
  protect_from_scale_in = true

  dynamic "launch_template" {
    for_each = var.spot == null ? [1] : []
    content {
      id      = aws_launch_template.runner.id
      version = aws_launch_template.runner.latest_version
    }
  }

  dynamic "mixed_instances_policy" {
    for_each = var.spot == null ? [] : [var.spot]
    content {
      instances_distribution {
        on_demand_base_capacity                  = mixed_instances_policy.value.on_demand_base_capacity
        on_demand_percentage_above_base_capacity = mixed_instances_policy.value.on_demand_percentage_above_base_capacity
        spot_allocation_strategy                 = mixed_instances_policy.value.spot_allocation_strategy
      }

      launch_template {
        launch_template_specification {
          launch_template_id = aws_launch_template.runner.id
          version            = aws_launch_template.runner.latest_version
        }

        dynamic "override" {
          for_each = var.instance_types
          content {
            instance_type = override.value
          }
        }
      }
    }
  }

  # Instances kept stopped (or hibernated, or running) beside the group; a scale-out takes
  # one before it launches one. A used instance is terminated on scale-in, never put back,
  # unless warm_pool.reuse (persistent mode).
  # With a warm pool, an instance waits in Pending:Wait (and Warmed:Pending:Wait) until its
  # boot script says its setup is done, so the group never stops one half installed.
  dynamic "initial_lifecycle_hook" {
    for_each = var.warm_pool == null ? [] : [var.warm_pool]
    content {
      name                 = local.warm_hook
      lifecycle_transition = "autoscaling:EC2_INSTANCE_LAUNCHING"
      default_result       = "CONTINUE"
      heartbeat_timeout    = initial_lifecycle_hook.value.setup_timeout
    }
  }

  dynamic "warm_pool" {
    for_each = var.warm_pool == null ? [] : [var.warm_pool]
    content {
      pool_state                  = title(warm_pool.value.state)
      min_size                    = warm_pool.value.min_size
      max_group_prepared_capacity = warm_pool.value.max_prepared == null ? -1 : warm_pool.value.max_prepared
      instance_reuse_policy {
        reuse_on_scale_in = warm_pool.value.reuse
      }
    }
  }

  dynamic "tag" {
    for_each = merge(local.tags, { Name = var.pool_name })
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    # The controller owns the desired capacity from the first tick on.
    ignore_changes = [desired_capacity]
  }
}
