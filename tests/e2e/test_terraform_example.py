"""terraform/examples/complete applied against moto's server on 127.0.0.1: the controller
config it generates from the pools passes `ci-autoscaler check-config`, and its runner
types, labels and pool names are exactly the groups terraform made.

The example is applied unchanged except for a `moto_override.tf` (the provider's
endpoints and fake credentials) and a tfvars file. It is applied with every optional
input the config template reads (a Slack alert receiver, a repository list); the default
variant (no receiver, no rule, every repository) is rendered by a second plan,
whose planned SSM parameter value is the config that variant would store. That plan also
shows what every instance may reach: no GitHub credential it could read (each instance
role reads and deletes its own parameter only), IMDSv2 with a hop limit of 1.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config import load_config
from autoscaler.sim.fleet import moto_session
from tests.conftest import require_tool
from tests.e2e.terraform_support import (
    MOTO_REGION,
    REPO,
    copy_tree,
    init,
    moto_provider,
    require_provider_mirror,
    run,
    terraform_env,
)

pytestmark = pytest.mark.e2e

OWNER = "my-org"
REPOS = ["app", "infra"]
TOKEN_PARAMETER = "/ci-autoscaler/github-token"
WEBHOOK_PARAMETER = "/ci-autoscaler/slack-webhook-url"
CONFIG_PARAMETER = "/ci-autoscaler/config.yaml"
# Every ${VAR} the generated config may reference, with a dummy value.
DUMMY_ENV = {
    "GITHUB_TOKEN": "ghp_not_a_real_token",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.invalid/services/T0/B0/not-real",
    "INTERRUPTION_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ci-autoscaler-interruptions",
}
# The Actions runner adds these labels itself (terraform/modules/runner-pool/main.tf).
RUNNER_DEFAULT_LABELS = frozenset({"self-hosted", "linux", "x64"})
VARIANTS = [
    pytest.param("full", id="full-slack-alerts-and-repos"),
    pytest.param("default", id="default-no-alerts"),
]


@dataclass(frozen=True)
class Applied:
    endpoint: str
    configs: dict[str, str]
    """Variant => the config YAML it stores in SSM."""
    outputs: dict[str, Any]
    planned: list[dict[str, Any]]
    """Every resource of the default variant's plan (``planned_values``, all modules)."""


def client(service: str, endpoint: str) -> Any:
    """A boto3 client of moto (typed Any: the stubs type clients per literal service name)."""
    session: Any = moto_session(MOTO_REGION)
    return session.client(service, endpoint_url=endpoint)


def tfvars(endpoint: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The example's required variables (ids of resources made in moto first), and the
    optional ones the full variant sets."""
    ec2 = client("ec2", endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=az)["Subnet"][
            "SubnetId"
        ]
        for i, az in enumerate(("us-east-1a", "us-east-1b"), start=1)
    ]
    amis = [i["ImageId"] for i in ec2.describe_images(Owners=["amazon"])["Images"][:2]]
    ssm = client("ssm", endpoint)
    ssm.put_parameter(Name=TOKEN_PARAMETER, Type="SecureString", Value="ghp_not_a_real_token")
    ssm.put_parameter(Name=WEBHOOK_PARAMETER, Type="SecureString", Value="https://x.invalid/")
    arn = f"arn:aws:ssm:{MOTO_REGION}:123456789012:parameter"
    base = {
        "region": MOTO_REGION,
        "github_owner": OWNER,
        "github_token_secret_arn": arn + TOKEN_PARAMETER,
        "image": f"123456789012.dkr.ecr.{MOTO_REGION}.amazonaws.com/ci-autoscaler:0.1.0",
        "vpc_id": vpc,
        "controller_subnet_ids": subnets[:1],
        "runner_subnet_ids": subnets,
        "cpu_ami_id": amis[0],
        "gpu_ami_id": amis[-1],
        "metrics_ingress_cidrs": ["10.0.0.0/16"],
    }
    return base, {"alert_webhook_secret_arn": arn + WEBHOOK_PARAMETER, "github_repos": REPOS}


def planned_config(
    terraform: str, root: Path, env: dict[str, str], args: list[str]
) -> tuple[str, list[dict[str, Any]]]:
    """The config YAML a plan with ``args`` would store in the SSM parameter, and every
    resource of that plan."""
    done = run(terraform, ["plan", "-no-color", "-out=variant.tfplan", *args], root, env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    done = run(terraform, ["show", "-json", "variant.tfplan"], root, env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    changes = plan["resource_changes"]
    [param] = [c for c in changes if c["address"] == "module.controller.aws_ssm_parameter.config"]
    value = param["change"]["after"]["value"]
    assert isinstance(value, str), param["change"]
    return value, list(_resources(plan["planned_values"]["root_module"]))


def _resources(module: dict[str, Any]) -> Any:
    yield from module.get("resources", [])
    for child in module.get("child_modules", []):
        yield from _resources(child)


@pytest.fixture(scope="module")
def applied(moto_module_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Applied:
    terraform = require_tool("terraform")
    mirror = require_provider_mirror()
    tmp = tmp_path_factory.mktemp("tf-example")
    root = copy_tree(tmp) / "examples" / "complete"
    (root / "moto_override.tf").write_text(moto_provider(moto_module_endpoint), encoding="utf-8")
    base, full = tfvars(moto_module_endpoint)
    (root / "moto.tfvars.json").write_text(json.dumps(base), "utf-8")
    (root / "full.tfvars.json").write_text(json.dumps(full), "utf-8")
    with_full = ["-var-file=moto.tfvars.json", "-var-file=full.tfvars.json"]
    env = terraform_env(tmp)
    init(terraform, root, env, mirror)
    done = run(terraform, ["apply", "-auto-approve", "-no-color", *with_full], root, env, 300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    done = run(terraform, ["output", "-json"], root, env)
    assert done.returncode == 0, done.stderr
    outputs = {k: v["value"] for k, v in json.loads(done.stdout).items()}
    stored = client("ssm", moto_module_endpoint).get_parameter(Name=CONFIG_PARAMETER)["Parameter"]
    default, planned = planned_config(terraform, root, env, ["-var-file=moto.tfvars.json"])
    return Applied(
        moto_module_endpoint, {"full": stored["Value"], "default": default}, outputs, planned
    )


def write_config(applied: Applied, variant: str, tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(applied.configs[variant], encoding="utf-8")
    return path


def managed_groups(endpoint: str) -> list[dict[str, Any]]:
    groups = client("autoscaling", endpoint).describe_auto_scaling_groups()["AutoScalingGroups"]
    managed = {"Key": "ci-autoscaler:managed", "Value": "true"}
    return [g for g in groups if any(t.items() >= managed.items() for t in g["Tags"])]


def tag(group: dict[str, Any], key: str) -> str:
    [value] = [t["Value"] for t in group["Tags"] if t["Key"] == key]
    return str(value)


def user_data_of(endpoint: str, group: dict[str, Any]) -> str:
    """The boot script of the group's launch template (its latest version)."""
    spec = (
        group.get("MixedInstancesPolicy", {})
        .get("LaunchTemplate", {})
        .get("LaunchTemplateSpecification")
        or group["LaunchTemplate"]
    )
    versions = client("ec2", endpoint).describe_launch_template_versions(
        LaunchTemplateId=spec["LaunchTemplateId"]
    )["LaunchTemplateVersions"]
    return base64.b64decode(versions[-1]["LaunchTemplateData"]["UserData"]).decode()


def registered_labels(endpoint: str, group: dict[str, Any]) -> frozenset[str]:
    """The labels a self-registering group's runners register with (its boot script)."""
    user_data = user_data_of(endpoint, group)
    match = re.search(r'--labels "([^"]*)"', user_data)
    assert match is not None, user_data
    passed = {label.strip().lower() for label in match.group(1).split(",") if label.strip()}
    return frozenset(passed) | RUNNER_DEFAULT_LABELS


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_config_passes_check_config(
    applied: Applied, variant: str, tmp_path: Path
) -> None:
    path = write_config(applied, variant, tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in DUMMY_ENV} | DUMMY_ENV
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "check-config", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr + applied.configs[variant]
    # The rule shipped in the package counts as one of them: it is on by default.
    counts = "2 alert rules, 1 receiver" if variant == "full" else "1 alert rule, 0 receivers"
    assert f"(2 runner types, {counts})" in done.stdout


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_config_names_exactly_the_pools_terraform_made(
    applied: Applied, variant: str, tmp_path: Path
) -> None:
    config = load_config(write_config(applied, variant, tmp_path), env=DUMMY_ENV)
    groups = managed_groups(applied.endpoint)
    made: dict[str, set[str]] = {}
    for g in groups:
        made.setdefault(tag(g, "ci-autoscaler:runner-type"), set()).add(g["AutoScalingGroupName"])
    assert {rt.name: set(rt.pools) for rt in config.runner_types} == made
    assert len(made) == 2

    by_name = {g["AutoScalingGroupName"]: g for g in groups}
    for rt in config.runner_types:
        for pool in rt.pools:
            user_data = user_data_of(applied.endpoint, by_name[pool])
            # Each instance reads the parameter the controller writes for it.
            wanted = config.jit.parameter_name(pool, "${INSTANCE_ID}")
            assert f'PARAMETER="{wanted}"' in user_data, (pool, wanted)
            if rt.ephemeral:
                # The controller registers these runners (with the type's labels).
                assert 'run.sh --jitconfig "$CREDENTIAL"' in user_data
                continue
            assert "--jitconfig" not in user_data, pool
            assert 'delete-parameter --region "$REGION" --name "$PARAMETER"' in user_data
            labels = registered_labels(applied.endpoint, by_name[pool])
            # Runners of the pool carry every label of their type, and nothing more was
            # asked for than the type lists (besides the runner's own defaults).
            assert rt.labels <= labels, (rt.name, pool, labels)
            assert labels - RUNNER_DEFAULT_LABELS <= rt.labels, (rt.name, pool, labels)
    assert config.github.owner == OWNER
    assert config.github.repos == (tuple(REPOS) if variant == "full" else None)
    assert config.aws.region == MOTO_REGION
    assert [rt.mode for rt in config.runner_types] == ["persistent", "ephemeral"]


def test_config_output_is_what_the_controller_reads(applied: Applied) -> None:
    assert applied.outputs["controller_config"] == yaml.safe_load(applied.configs["full"])
    assert applied.outputs["pools"] == {
        tag(g, "ci-autoscaler:runner-type"): g["AutoScalingGroupName"]
        for g in managed_groups(applied.endpoint)
    }


def test_every_launch_template_requires_imdsv2_with_a_hop_limit_of_one(applied: Applied) -> None:
    """A job, or a container it starts, must not take the instance role's credentials:
    IMDSv2 only, and its session token's answer never crosses a second hop."""
    templates = [r for r in applied.planned if r["type"] == "aws_launch_template"]
    assert len(templates) == 2
    for t in templates:
        [options] = t["values"]["metadata_options"]
        assert options["http_tokens"] == "required", t["address"]
        assert options["http_put_response_hop_limit"] == 1, t["address"]


def test_no_instance_can_read_a_github_credential(applied: Applied) -> None:
    """The instance roles may read (and delete) their own instance's parameter under the
    credential path, and nothing else: no shared token parameter, no grant without the
    instance-id condition. Their boot scripts call no GitHub API."""
    pools = [
        r
        for r in applied.planned
        if r["type"] == "aws_iam_role_policy"
        and r["address"].startswith(("module.cpu_pool.", "module.gpu_pool."))
    ]
    assert len(pools) == 2
    for policy in pools:
        doc = json.loads(policy["values"]["policy"])
        for statement in doc["Statement"]:
            actions = (
                statement["Action"]
                if isinstance(statement["Action"], list)
                else [statement["Action"]]
            )
            assert set(actions) <= {"ssm:GetParameter", "ssm:DeleteParameter"}, statement
            resources = statement["Resource"]
            resources = resources if isinstance(resources, list) else [resources]
            pool = "ci-cpu" if "cpu_pool" in policy["address"] else "ci-gpu"
            assert all(r.endswith(f":parameter/ci-autoscaler/jit/{pool}/*") for r in resources)
            tag = statement["Condition"]["StringEquals"][
                "ssm:resourceTag/ci-autoscaler:instance-id"
            ]
            assert tag == "${ec2:InstanceID}"
    parameters = [r["values"]["name"] for r in applied.planned if r["type"] == "aws_ssm_parameter"]
    assert parameters == [CONFIG_PARAMETER]  # the controller's config; no token for instances
    for group in managed_groups(applied.endpoint):
        user_data = user_data_of(applied.endpoint, group)
        assert "api.github.com" not in user_data and "GITHUB_TOKEN" not in user_data
        assert "registration-token" not in user_data
        assert "--uid-owner runner -j REJECT" in user_data  # the runner user: no IMDS
