# ------------------------------------------------------------------ EC2 interruptions
#
# EventBridge puts EC2 Spot interruption warnings, rebalance recommendations and instance
# terminations into one SQS queue; the controller reads it (aws.interruption_queue_url,
# given to it as $${INTERRUPTION_QUEUE_URL}): it deregisters an idle runner on a warned
# instance, backs the pool off, and tells the job-retry classifier which jobs lost their
# machine. EC2's own events carry no group or tag, so the EC2 rules take every instance of
# the account and region and the controller ignores (counts, deletes) the ones it does not
# manage; the Auto Scaling rule (health-check and rebalancing terminations, with their
# cause) is limited to the managed groups.

variable "interruption_queue" {
  description = "Create the SQS queue and EventBridge rules for EC2 Spot interruption warnings, rebalance recommendations and terminations, and let the controller read it. The container gets its URL as INTERRUPTION_QUEUE_URL: set `aws.interruption_queue_url: $${INTERRUPTION_QUEUE_URL}` in config_yaml."
  type        = bool
  default     = false
}

variable "managed_group_names" {
  description = "Auto Scaling groups whose instance terminations (health checks, rebalancing) also go to the interruption queue (the runner-pool modules' asg_name)."
  type        = list(string)
  default     = []
}

locals {
  # Every rule, its pattern as JSON (the patterns differ in shape); only those enabled are made.
  all_interruption_rules = {
    ec2-warnings = {
      enabled     = var.interruption_queue
      description = "EC2 Spot interruption warnings and rebalance recommendations"
      pattern = jsonencode({
        source      = ["aws.ec2"]
        detail-type = ["EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation"]
      })
    }
    ec2-terminations = {
      enabled     = var.interruption_queue
      description = "EC2 instances shutting down or terminated"
      pattern = jsonencode({
        source      = ["aws.ec2"]
        detail-type = ["EC2 Instance State-change Notification"]
        detail      = { state = ["shutting-down", "terminated"] }
      })
    }
    asg-terminations = {
      enabled     = var.interruption_queue && length(var.managed_group_names) > 0
      description = "Instances the managed Auto Scaling groups terminated (health checks, rebalancing)"
      pattern = jsonencode({
        source      = ["aws.autoscaling"]
        detail-type = ["EC2 Instance Terminate Successful"]
        detail      = { AutoScalingGroupName = var.managed_group_names }
      })
    }
  }
  interruption_rules = { for k, v in local.all_interruption_rules : k => v if v.enabled }
}

resource "aws_sqs_queue" "interruptions" {
  count = var.interruption_queue ? 1 : 0
  name  = "${var.name}-interruptions"
  # A warning is worth two minutes; an hour covers a controller restart.
  message_retention_seconds  = 3600
  receive_wait_time_seconds  = 20
  visibility_timeout_seconds = 60
  sqs_managed_sse_enabled    = true
  tags                       = local.tags
}

resource "aws_cloudwatch_event_rule" "interruptions" {
  for_each      = local.interruption_rules
  name          = "${var.name}-${each.key}"
  description   = "ci-autoscaler: ${each.value.description}"
  event_pattern = each.value.pattern
  tags          = local.tags
}

resource "aws_cloudwatch_event_target" "interruptions" {
  for_each = local.interruption_rules
  rule     = aws_cloudwatch_event_rule.interruptions[each.key].name
  arn      = aws_sqs_queue.interruptions[0].arn
}

# Only these rules may send to the queue.
data "aws_iam_policy_document" "interruption_queue" {
  count = var.interruption_queue ? 1 : 0

  statement {
    sid       = "EventBridgeRules"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.interruptions[0].arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [for r in aws_cloudwatch_event_rule.interruptions : r.arn]
    }
  }
}

resource "aws_sqs_queue_policy" "interruptions" {
  count     = var.interruption_queue ? 1 : 0
  queue_url = aws_sqs_queue.interruptions[0].id
  policy    = data.aws_iam_policy_document.interruption_queue[0].json
}

output "interruption_queue_url" {
  description = "URL of the interruption queue (null without interruption_queue); the container has it as INTERRUPTION_QUEUE_URL."
  value       = one(aws_sqs_queue.interruptions[*].url)
}
