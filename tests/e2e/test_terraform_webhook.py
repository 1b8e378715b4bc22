"""The controller module's optional webhook entry, applied into moto's server: an HTTPS
ALB that forwards ``POST /github/webhook`` and nothing else to the task's webhook port,
which only the ALB may reach; the webhook secret comes from SSM like the token.

Without ``webhook_certificate_arn`` nothing of it exists (``test_terraform_moto`` applies
the module so and finds only the metrics port open and only ``GITHUB_TOKEN``).
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from autoscaler.sim.fleet import moto_session
from tests.conftest import require_tool
from tests.e2e.terraform_support import (
    copy_tree,
    init,
    moto_provider,
    require_provider_mirror,
    run,
    terraform_env,
)

pytestmark = pytest.mark.e2e

REGION = "us-east-1"
SECRET_PARAMETER = "/ci-autoscaler/github-webhook-secret"
ROOT = """
{provider}
module "controller" {{
  source                    = "../terraform/modules/controller"
  name                      = "hooked"
  image                     = "123456789012.dkr.ecr.{region}.amazonaws.com/ci-autoscaler:0.1.0"
  config_yaml               = "github:\\n  owner: my-org\\n  token: $${{GITHUB_TOKEN}}\\n"
  github_token_secret_arn   = "arn:aws:ssm:{region}:123456789012:parameter{token}"
  webhook_secret_arn        = "arn:aws:ssm:{region}:123456789012:parameter{secret}"
  webhook_certificate_arn   = "{certificate}"
  webhook_public_subnet_ids = ["{subnet_a}", "{subnet_b}"]
  webhook_ingress_cidrs     = ["192.30.252.0/22"]
  vpc_id                    = "{vpc}"
  subnet_ids                = ["{subnet_a}"]
  metrics_ingress_cidrs     = ["10.0.0.0/16"]
}}

output "webhook_url" {{
  value = module.controller.webhook_url
}}
"""


def session() -> boto3.session.Session:
    return moto_session(REGION)


@pytest.fixture(scope="module")
def applied(moto_module_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    terraform = require_tool("terraform")
    mirror = require_provider_mirror()
    ec2 = session().client("ec2", endpoint_url=moto_module_endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.1.{i}.0/24", AvailabilityZone=zone)
        for i, zone in ((1, "us-east-1a"), (2, "us-east-1b"))
    ]
    acm = session().client("acm", endpoint_url=moto_module_endpoint)
    certificate = acm.request_certificate(DomainName="ci-hooks.example.com")["CertificateArn"]
    tmp = tmp_path_factory.mktemp("tf-webhook")
    copy_tree(tmp)
    root = tmp / "root"
    root.mkdir()
    (root / "main.tf").write_text(
        ROOT.format(
            provider=moto_provider(moto_module_endpoint, REGION),
            region=REGION,
            secret=SECRET_PARAMETER,
            token="/ci-autoscaler/github-token",
            certificate=certificate,
            subnet_a=subnets[0]["Subnet"]["SubnetId"],
            subnet_b=subnets[1]["Subnet"]["SubnetId"],
            vpc=vpc,
        ),
        encoding="utf-8",
    )
    env = terraform_env(tmp)
    init(terraform, root, env, mirror)
    done = run(terraform, ["apply", "-auto-approve", "-no-color"], root, env, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    yield moto_module_endpoint


def _alb(endpoint: str) -> dict[str, object]:
    elbv2 = session().client("elbv2", endpoint_url=endpoint)
    [alb] = [
        b
        for b in elbv2.describe_load_balancers()["LoadBalancers"]
        if b["LoadBalancerName"].startswith("cihook")
    ]
    return dict(alb)


def test_only_post_github_webhook_is_forwarded_over_https(applied: str) -> None:
    elbv2 = session().client("elbv2", endpoint_url=applied)
    alb = _alb(applied)
    [listener] = elbv2.describe_listeners(LoadBalancerArn=alb["LoadBalancerArn"])["Listeners"]
    assert (listener["Port"], listener["Protocol"]) == (443, "HTTPS")
    rules = elbv2.describe_rules(ListenerArn=listener["ListenerArn"])["Rules"]
    [default] = [r for r in rules if r["IsDefault"]]
    assert default["Actions"][0]["Type"] == "fixed-response"
    assert default["Actions"][0]["FixedResponseConfig"]["StatusCode"] == "404"
    [forward] = [r for r in rules if not r["IsDefault"]]
    conditions = {c["Field"]: c for c in forward["Conditions"]}
    assert conditions["path-pattern"]["PathPatternConfig"]["Values"] == ["/github/webhook"]
    assert conditions["http-request-method"]["HttpRequestMethodConfig"]["Values"] == ["POST"]
    [action] = forward["Actions"]
    [group] = elbv2.describe_target_groups(TargetGroupArns=[action["TargetGroupArn"]])[
        "TargetGroups"
    ]
    assert (group["Port"], group["TargetType"]) == (9465, "ip")
    assert group["HealthCheckPath"] == "/github/webhook"
    assert group["Matcher"]["HttpCode"] == "405"  # GET on the listener: alive, no delivery


def test_the_webhook_port_is_reachable_from_the_alb_only(applied: str) -> None:
    ec2 = session().client("ec2", endpoint_url=applied)
    groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["hooked-*"]}])[
        "SecurityGroups"
    ]
    by_name = {g["GroupName"].rsplit("-", 1)[0]: g for g in groups}
    task, alb = by_name["hooked"], by_name["hooked-webhook"]
    task_rules = {
        (
            p["FromPort"],
            tuple(r["CidrIp"] for r in p.get("IpRanges", [])),
            tuple(u["GroupId"] for u in p.get("UserIdGroupPairs", [])),
        )
        for p in task["IpPermissions"]
    }
    assert task_rules == {(9464, ("10.0.0.0/16",), ()), (9465, (), (alb["GroupId"],))}
    alb_rules = {
        (p["FromPort"], tuple(r["CidrIp"] for r in p.get("IpRanges", [])))
        for p in alb["IpPermissions"]
    }
    assert alb_rules == {(443, ("192.30.252.0/22",))}


def test_the_secret_comes_from_ssm_and_the_port_is_mapped(applied: str) -> None:
    ecs = session().client("ecs", endpoint_url=applied)
    [arn] = ecs.list_task_definitions(familyPrefix="hooked")["taskDefinitionArns"]
    task = ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"]
    controller = next(c for c in task["containerDefinitions"] if c["name"] == "controller")
    secrets = {s["name"]: s["valueFrom"] for s in controller["secrets"]}
    assert secrets["GITHUB_WEBHOOK_SECRET"].endswith(f"parameter{SECRET_PARAMETER}")
    assert sorted(p["containerPort"] for p in controller["portMappings"]) == [9464, 9465]
