"""modules/runner-pool applied by terraform against moto's server on 127.0.0.1, then scaled
by the controller's own pool adapter.

Known disagreement (not asserted): a second `terraform plan` is not empty. moto echoes the
launch template's own tags (CreateLaunchTemplate TagSpecifications, ResourceType
"launch-template") back inside LaunchTemplateData.TagSpecifications of
DescribeLaunchTemplateVersions; real EC2 does not, so the provider plans to remove that
block and to bump the template version on every run. See terraform/README.md.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from autoscaler.config import AwsConfig
from autoscaler.domain import InstanceLifecycle
from autoscaler.pools.aws_asg import AwsAsgPool
from autoscaler.telemetry import Metrics
from tests.conftest import free_port, require_tool
from tests.e2e.terraform_support import copy_tree, init, provider_mirror, run, terraform_env

pytestmark = pytest.mark.e2e

REGION = "us-east-1"
POOL = "ci-gpu-spot"
RUNNER_TYPE = "linux.g5.4xlarge.nvidia.gpu"
INSTANCE_TYPES = ["g5.4xlarge", "g5.8xlarge"]
SERVICES = ("autoscaling", "ec2", "iam", "sts", "ssm")

ROOT_MODULE = """
provider "aws" {{
  region                      = "{region}"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  endpoints {{
{endpoints}
  }}
}}

module "pool" {{
  source                            = "../terraform/modules/runner-pool"
  pool_name                         = "{pool}"
  runner_type                       = "{runner_type}"
  labels                            = ["self-hosted", "{runner_type}"]
  github_url                        = "https://github.com/my-org"
  registration_token_parameter_name = "/ci-autoscaler/runner-registration-token"
  ami_id                            = "{ami}"
  instance_types                    = [{instance_types}]
  subnet_ids                        = ["{subnet}"]
  max_size                          = 5
  spot                              = {{ on_demand_base_capacity = 1 }}
}}

output "asg_name" {{
  value = module.pool.asg_name
}}
"""


def session() -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name=REGION,
    )


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def applied(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Apply the module into moto; returns the endpoint."""
    terraform = require_tool("terraform")
    mirror = provider_mirror()
    if mirror is None:
        pytest.fail("no terraform-provider-aws_* mirror found on this machine")
    ec2 = session().client("ec2", endpoint_url=moto_endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]

    tmp = tmp_path_factory.mktemp("tf-moto")
    copy_tree(tmp)
    root = tmp / "root"
    root.mkdir()
    endpoints = "\n".join(f'    {s:<11} = "{moto_endpoint}"' for s in SERVICES)
    (root / "main.tf").write_text(
        ROOT_MODULE.format(
            region=REGION,
            endpoints=endpoints,
            pool=POOL,
            runner_type=RUNNER_TYPE,
            ami=ami,
            instance_types=", ".join(f'"{t}"' for t in INSTANCE_TYPES),
            subnet=subnet["Subnet"]["SubnetId"],
        ),
        encoding="utf-8",
    )
    env = terraform_env(tmp)
    init(terraform, root, env, mirror)
    done = run(terraform, ["apply", "-auto-approve", "-no-color"], root, env, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    return moto_endpoint


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
