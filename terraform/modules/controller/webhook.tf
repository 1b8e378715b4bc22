# Optional public HTTPS entry for GitHub's workflow_job webhooks.
#
# Why an ALB listener and not an API Gateway HTTP API with a VPC link: the Fargate task
# registers its IP in an ALB target group directly (the ECS service's load_balancer
# block), while an HTTP API reaches a private task only through a VPC link to an ALB, an
# NLB or Cloud Map - one more hop and resource for the same result. The ALB's listener
# rule forwards POST /github/webhook alone (everything else gets a fixed 404, so
# /metrics, /healthz and the status page are never public: they live on another port the
# ALB cannot reach), terminates TLS with your ACM certificate, and its security group can
# be narrowed to GitHub's published hook ranges (api.github.com/meta "hooks").
#
# Everything here is created only when webhook_certificate_arn is set.

locals {
  webhook_enabled = var.webhook_certificate_arn != null
}

resource "aws_security_group" "webhook_alb" {
  count       = local.webhook_enabled ? 1 : 0
  name_prefix = "${var.name}-webhook-"
  description = "ci-autoscaler webhook entry: HTTPS from GitHub's hook ranges"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-webhook" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "webhook_https" {
  for_each          = local.webhook_enabled ? toset(var.webhook_ingress_cidrs) : toset([])
  security_group_id = aws_security_group.webhook_alb[0].id
  description       = "GitHub webhook deliveries (HTTPS)"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = strcontains(each.value, ":") ? null : each.value
  cidr_ipv6         = strcontains(each.value, ":") ? each.value : null
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "webhook_to_task" {
  count                        = local.webhook_enabled ? 1 : 0
  security_group_id            = aws_security_group.webhook_alb[0].id
  description                  = "to the controller's webhook listener only"
  ip_protocol                  = "tcp"
  from_port                    = var.webhook_port
  to_port                      = var.webhook_port
  referenced_security_group_id = aws_security_group.this.id
  tags                         = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "task_webhook" {
  count                        = local.webhook_enabled ? 1 : 0
  security_group_id            = aws_security_group.this.id
  description                  = "webhook deliveries from the ALB only"
  ip_protocol                  = "tcp"
  from_port                    = var.webhook_port
  to_port                      = var.webhook_port
  referenced_security_group_id = aws_security_group.webhook_alb[0].id
  tags                         = local.tags
}

resource "aws_lb" "webhook" {
  #checkov:skip=CKV2_AWS_28:the webhook accepts only deliveries signed with the webhook secret (HMAC of the body), and webhook_ingress_cidrs limits who reaches it (GitHub's hooks ranges); a WAF is the operator's to attach
  #checkov:skip=CKV_AWS_91:GitHub keeps a log of every delivery (the controller reads it) and the controller logs each one; an S3 bucket for access logs is the operator's to add
  #checkov:skip=CKV_AWS_150:the balancer holds no state: recreating it loses nothing, and terraform destroy must work
  count                      = local.webhook_enabled ? 1 : 0
  name_prefix                = "cihook"
  load_balancer_type         = "application"
  internal                   = false
  subnets                    = var.webhook_public_subnet_ids
  security_groups            = [aws_security_group.webhook_alb[0].id]
  drop_invalid_header_fields = true
  idle_timeout               = 30
  tags                       = local.tags
}

resource "aws_lb_target_group" "webhook" {
  #checkov:skip=CKV_AWS_378:TLS ends at the balancer's HTTPS listener; the target is the task's private port, reachable only from the balancer's security group
  count       = local.webhook_enabled ? 1 : 0
  name_prefix = "cihook"
  port        = var.webhook_port
  protocol    = "HTTP"
  target_type = "ip"
  vpc_id      = var.vpc_id
  tags        = local.tags

  # The listener serves POST /github/webhook only; a GET there answers 405, which proves
  # it is up without sending a delivery. With the state table both tasks answer so: the
  # webhook job index lives in the table, a delivery to either is read by the leader.
  health_check {
    path                = "/github/webhook"
    matcher             = "405"
    interval            = 15
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  deregistration_delay = 10

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_listener" "webhook" {
  count             = local.webhook_enabled ? 1 : 0
  load_balancer_arn = aws_lb.webhook[0].arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.webhook_certificate_arn
  tags              = local.tags

  default_action {
    type = "fixed-response"
    fixed_response {
      content_type = "text/plain"
      message_body = "not found"
      status_code  = "404"
    }
  }
}

resource "aws_lb_listener_rule" "webhook" {
  count        = local.webhook_enabled ? 1 : 0
  listener_arn = aws_lb_listener.webhook[0].arn
  priority     = 10
  tags         = local.tags

  condition {
    path_pattern {
      values = ["/github/webhook"]
    }
  }

  condition {
    http_request_method {
      values = ["POST"]
    }
  }

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.webhook[0].arn
  }
}
