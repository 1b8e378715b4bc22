"""The modules applied by terraform against moto's server on 127.0.0.1: runner-pool (then
scaled by the controller's own pool adapter) and controller (then planned again: no drift).

Known disagreements (tolerated, listed in terraform/README.md): a second `terraform plan`
is not empty. aws_launch_template: moto echoes CreateLaunchTemplate's own TagSpecifications
(ResourceType "launch-template") inside DescribeLaunchTemplateVersions' LaunchTemplateData,
so the provider plans a new template version (and the group's version follows).
aws_ecs_service: moto's DescribeServices returns no availabilityZoneRebalancing (nor
deploymentConfiguration), so the provider plans to set it to "DISABLED" again.
See terraform/README.md.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import boto3
import pytest

from autoscaler.config import AwsConfig
from autoscaler.domain import InstanceLifecycle
from autoscaler.scale.aws.asg import IAM_ACTIONS, AwsAsgPool
from autoscaler.scale.aws.ssm import IAM_ACTIONS as SSM_IAM_ACTIONS
from autoscaler.scale.aws.ssm import IAM_LIST_ACTION as SSM_IAM_LIST_ACTION
from autoscaler.sim.fleet import moto_session
from autoscaler.state.dynamodb_table import IAM_ACTIONS as STATE_IAM_ACTIONS
from autoscaler.state.dynamodb_table import DynamoTable, create_table
from autoscaler.telemetry import Metrics
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
POOL = "ci-gpu-spot"
RUNNER_TYPE = "linux.g5.4xlarge.nvidia.gpu"
INSTANCE_TYPES = ["g5.4xlarge", "g5.8xlarge"]
STATE_TABLE = "ci-autoscaler-state"
CONFIG_YAML = (
    "github:\n  owner: my-org\n  token: $${GITHUB_TOKEN}\nrunner_types:\n  a:\n    labels: [x]\n"
    f"state:\n  backend: dynamodb\n  table: {STATE_TABLE}\n"
)
TOKEN_PARAMETER = "/ci-autoscaler/github-token"

ROOT_MODULE = """
{provider}
module "pool" {{
  source                            = "../terraform/modules/runner-pool"
  pool_name                         = "{pool}"
  runner_type                       = "{runner_type}"
  labels                            = ["self-hosted", "{runner_type}"]
  github_url                        = "https://github.com/my-org"
  mode                              = "persistent"
  ami_id                            = "{ami}"
  instance_types                    = [{instance_types}]
  subnet_ids                        = ["{subnet}"]
  max_size                          = 5
  spot                              = {{ on_demand_base_capacity = 1 }}
}}

output "asg_name" {{
  value = module.pool.asg_name
}}

module "controller" {{
  source                  = "../terraform/modules/controller"
  image                   = "123456789012.dkr.ecr.{region}.amazonaws.com/ci-autoscaler:0.1.0"
  config_yaml             = "{config_yaml}"
  github_token_secret_arn = "arn:aws:ssm:{region}:123456789012:parameter{token_parameter}"
  vpc_id                  = "{vpc}"
  subnet_ids              = ["{subnet}"]
  metrics_ingress_cidrs   = ["10.0.0.0/16"]
  state_table_name        = "{state_table}"
}}
"""


def session() -> boto3.session.Session:
    return moto_session(REGION)


@pytest.fixture(scope="module")
def applied(moto_module_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Apply both modules into moto; yields the endpoint, then checks the second plan."""
    terraform = require_tool("terraform")
    mirror = require_provider_mirror()
    ec2 = session().client("ec2", endpoint_url=moto_module_endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ssm = session().client("ssm", endpoint_url=moto_module_endpoint)
    ssm.put_parameter(Name=TOKEN_PARAMETER, Type="SecureString", Value="ghp_not_a_real_token")

    tmp = tmp_path_factory.mktemp("tf-moto")
    copy_tree(tmp)
    root = tmp / "root"
    root.mkdir()
    (root / "main.tf").write_text(
        ROOT_MODULE.format(
            region=REGION,
            provider=moto_provider(moto_module_endpoint, REGION),
            pool=POOL,
            runner_type=RUNNER_TYPE,
            ami=ami,
            instance_types=", ".join(f'"{t}"' for t in INSTANCE_TYPES),
            subnet=subnet["Subnet"]["SubnetId"],
            vpc=vpc,
            config_yaml=CONFIG_YAML.replace("\n", "\\n"),
            token_parameter=TOKEN_PARAMETER,
            state_table=STATE_TABLE,
        ),
        encoding="utf-8",
    )
    env = terraform_env(tmp)
    init(terraform, root, env, mirror)
    done = run(terraform, ["apply", "-auto-approve", "-no-color"], root, env, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    yield moto_module_endpoint
    # Only the known disagreements (module docstring) may show in the second plan.
    done = run(terraform, ["plan", "-no-color"], root, env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    changing = set(re.findall(r"^\s*# (module\.\S+) will be", done.stdout, re.MULTILINE))
    assert changing <= {
        "module.pool.aws_launch_template.runner",
        "module.pool.aws_autoscaling_group.pool",
        "module.controller.aws_ecs_service.this",
    }, done.stdout[-4000:]


def group(endpoint: str) -> dict[str, Any]:
    client = session().client("autoscaling", endpoint_url=endpoint)
    groups = client.describe_auto_scaling_groups(AutoScalingGroupNames=[POOL])
    assert len(groups["AutoScalingGroups"]) == 1
    return dict(groups["AutoScalingGroups"][0])


def test_group_is_protected_tagged_and_mixed(applied: str) -> None:
    g = group(applied)
    assert g["NewInstancesProtectedFromScaleIn"] is True
    tags = {t["Key"]: (t["Value"], t["PropagateAtLaunch"]) for t in g["Tags"]}
    assert tags["ci-autoscaler:managed"] == ("true", True)
    assert tags["ci-autoscaler:runner-type"] == (RUNNER_TYPE, True)
    assert (g["MinSize"], g["MaxSize"], g["DesiredCapacity"]) == (0, 5, 0)
    assert [p["ProcessName"] for p in g["SuspendedProcesses"]] == ["AZRebalance"]
    policy = g["MixedInstancesPolicy"]
    overrides = policy["LaunchTemplate"]["Overrides"]
    assert [o["InstanceType"] for o in overrides] == INSTANCE_TYPES
    assert policy["InstancesDistribution"]["OnDemandBaseCapacity"] == 1


def test_launch_template_registers_an_ephemeral_runner_named_after_the_instance(
    applied: str,
) -> None:
    spec = group(applied)["MixedInstancesPolicy"]["LaunchTemplate"]
    template_id = spec["LaunchTemplateSpecification"]["LaunchTemplateId"]
    ec2 = session().client("ec2", endpoint_url=applied)
    versions = ec2.describe_launch_template_versions(LaunchTemplateId=template_id)
    data = versions["LaunchTemplateVersions"][-1]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert data["InstanceInitiatedShutdownBehavior"] == "terminate"
    user_data = base64.b64decode(data["UserData"]).decode()
    assert f'RUNNER_NAME="{POOL}-${{INSTANCE_ID}}"' in user_data
    assert '--name "$RUNNER_NAME"' in user_data
    assert "--ephemeral" in user_data
    assert f'--labels "{RUNNER_TYPE}"' in user_data


def test_controller_pool_adapter_scales_the_group_terraform_made(applied: str) -> None:
    pool = AwsAsgPool(AwsConfig(region=REGION, endpoint_url=applied), Metrics(), session=session())
    pool.set_desired_capacity(POOL, 2)
    state = pool.describe([POOL])[POOL]
    assert state.desired_capacity == 2
    assert len(state.instances) == 2
    assert all(i.protected_from_scale_in for i in state.instances)

    pool.terminate_instance(POOL, state.instances[0].id)
    after = pool.describe([POOL])[POOL]
    assert after.desired_capacity == 1
    assert after.live_instances == 1
    assert state.instances[0].id not in {
        i.id for i in after.instances if i.lifecycle is not InstanceLifecycle.TERMINATING
    }


def test_controller_service_runs_two_read_only_non_root_tasks(applied: str) -> None:
    """Two controllers with the state table (one leads; the other takes over)."""
    ecs = session().client("ecs", endpoint_url=applied)
    service = ecs.describe_services(cluster="ci-autoscaler", services=["ci-autoscaler"])
    svc = service["services"][0]
    assert svc["desiredCount"] == 2
    assert svc["launchType"] == "FARGATE"
    # moto keeps no deploymentConfiguration (min 100 / max 200 %); the HCL test covers it.
    task = ecs.describe_task_definition(taskDefinition=svc["taskDefinition"])["taskDefinition"]
    containers = {c["name"]: c for c in task["containerDefinitions"]}
    controller = containers["controller"]
    assert controller["readonlyRootFilesystem"] is True
    assert controller["user"] == "10001:10001"
    assert controller["command"] == ["run", "--config", "/etc/ci-autoscaler/config.yaml"]
    assert [s["name"] for s in controller["secrets"]] == ["GITHUB_TOKEN"]
    assert controller["secrets"][0]["valueFrom"].endswith(f"parameter{TOKEN_PARAMETER}")
    assert "/healthz" in " ".join(controller["healthCheck"]["command"])
    assert controller["dependsOn"] == [{"containerName": "config", "condition": "SUCCESS"}]
    assert containers["config"]["essential"] is False

    ssm = session().client("ssm", endpoint_url=applied)
    stored = ssm.get_parameter(Name="/ci-autoscaler/config.yaml")["Parameter"]["Value"]
    assert stored == CONFIG_YAML.replace("$${", "${")


def test_controller_metrics_port_open_only_to_the_given_cidr(applied: str) -> None:
    ec2 = session().client("ec2", endpoint_url=applied)
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": ["ci-autoscaler-*"]}]
    )
    [group] = groups["SecurityGroups"]
    ingress = [
        (p["IpProtocol"], p["FromPort"], p["ToPort"], r["CidrIp"])
        for p in group["IpPermissions"]
        for r in p.get("IpRanges", [])
    ]
    assert ingress == [("tcp", 9464, 9464, "10.0.0.0/16")]


def test_controller_task_role_grants_exactly_the_adapter_calls(applied: str) -> None:
    iam = session().client("iam", endpoint_url=applied)
    roles = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    [task_role] = [r for r in roles if r.startswith("ci-autoscaler-task-")]
    names = iam.list_role_policies(RoleName=task_role)["PolicyNames"]
    assert iam.list_attached_role_policies(RoleName=task_role)["AttachedPolicies"] == []
    granted: set[str] = set()
    table_arn = (
        session()
        .client("dynamodb", endpoint_url=applied)
        .describe_table(TableName=STATE_TABLE)["Table"]["TableArn"]
    )
    for name in names:
        document = iam.get_role_policy(RoleName=task_role, PolicyName=name)["PolicyDocument"]
        if isinstance(document, str):
            document = json.loads(unquote(document))
        for statement in document["Statement"]:
            actions = statement["Action"]
            actions = {actions} if isinstance(actions, str) else set(actions)
            granted |= actions
            if any(a.startswith("dynamodb:") for a in actions):
                assert actions == STATE_IAM_ACTIONS
                assert statement["Resource"] in (table_arn, [table_arn]), "that table only"
    assert granted == set(IAM_ACTIONS) | STATE_IAM_ACTIONS | set(SSM_IAM_ACTIONS) | {
        SSM_IAM_LIST_ACTION
    }


def described(endpoint: str, table: str) -> dict[str, Any]:
    client = session().client("dynamodb", endpoint_url=endpoint)
    t = client.describe_table(TableName=table)["Table"]
    ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    backups = client.describe_continuous_backups(TableName=table)["ContinuousBackupsDescription"]
    return {
        "KeySchema": t["KeySchema"],
        "AttributeDefinitions": sorted(t["AttributeDefinitions"], key=lambda a: a["AttributeName"]),
        "BillingMode": t["BillingModeSummary"]["BillingMode"],
        "TimeToLive": (ttl["TimeToLiveStatus"], ttl.get("AttributeName")),
        "PointInTimeRecovery": backups["PointInTimeRecoveryDescription"][
            "PointInTimeRecoveryStatus"
        ],
    }


def test_state_create_table_makes_the_table_terraform_made(applied: str) -> None:
    """The same table from both: what terraform applied and what `state create-table`
    creates, as DynamoDB describes them."""
    ours = DynamoTable(
        AwsConfig(region=REGION, endpoint_url=applied), "by-the-cli", Metrics(), session=session()
    )
    assert create_table(ours, sleep=lambda _: None) == "created"
    assert described(applied, "by-the-cli") == described(applied, STATE_TABLE)
    assert described(applied, STATE_TABLE)["TimeToLive"] == ("ENABLED", "expires_at")
