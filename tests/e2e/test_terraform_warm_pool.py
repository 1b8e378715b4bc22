"""The runner-pool module's warm pool, applied by terraform against moto's server: the
group gets the warm pool ``warm_pool`` says (DescribeWarmPool shows it), the boot script
waits for the group to put an instance in service before it reads its credential, and
``warm_pool = null`` applied again removes it. A warm pool on a Spot group is refused at
plan time."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

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
POOL = "ci-cpu-warm"

ROOT = """
{provider}
module "pool" {{
  source         = "../terraform/modules/runner-pool"
  pool_name      = "{pool}"
  runner_type    = "linux.4xlarge"
  labels         = ["self-hosted", "linux.4xlarge"]
  github_url     = "https://github.com/my-org"
  ami_id         = "{ami}"
  instance_types = ["c6i.4xlarge"]
  subnet_ids     = ["{subnet}"]
  max_size       = 10
  spot           = {spot}
  warm_pool      = {warm_pool}
}}
"""


class Root:
    def __init__(self, tmp: Path, endpoint: str) -> None:
        self.terraform = require_tool("terraform")
        ec2 = moto_session(REGION).client("ec2", endpoint_url=endpoint)
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        self.values = {
            "provider": moto_provider(endpoint, REGION),
            "pool": POOL,
            "ami": ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"],
            "subnet": subnet,
        }
        copy_tree(tmp)
        self.dir = tmp / "root"
        self.dir.mkdir()
        self.env = terraform_env(tmp)
        self.endpoint = endpoint
        self.write(warm_pool="null")
        init(self.terraform, self.dir, self.env, require_provider_mirror())

    def write(self, *, warm_pool: str, spot: str = "null") -> None:
        text = ROOT.format(**self.values, warm_pool=warm_pool, spot=spot)
        (self.dir / "main.tf").write_text(text, encoding="utf-8")

    def apply(self) -> None:
        done = run(self.terraform, ["apply", "-auto-approve", "-no-color"], self.dir, self.env, 300)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr

    def plan(self) -> tuple[int, str]:
        done = run(self.terraform, ["plan", "-no-color"], self.dir, self.env)
        return done.returncode, done.stdout + done.stderr

    def warm_pool(self) -> dict[str, Any] | None:
        client = moto_session(REGION).client("autoscaling", endpoint_url=self.endpoint)
        answer: dict[str, Any] = dict(client.describe_warm_pool(AutoScalingGroupName=POOL))
        found: dict[str, Any] | None = answer.get("WarmPoolConfiguration")
        return found

    def user_data(self) -> str:
        session = moto_session(REGION)
        asg = session.client("autoscaling", endpoint_url=self.endpoint)
        [group] = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[POOL])[
            "AutoScalingGroups"
        ]
        template = group["LaunchTemplate"]["LaunchTemplateId"]
        ec2 = session.client("ec2", endpoint_url=self.endpoint)
        [version] = ec2.describe_launch_template_versions(
            LaunchTemplateId=template, Versions=["$Latest"]
        )["LaunchTemplateVersions"]
        return base64.b64decode(version["LaunchTemplateData"]["UserData"]).decode()


@pytest.mark.timeout(900)  # init, two applies and a plan: each one a few minutes under load
def test_the_module_creates_the_warm_pool_and_null_removes_it(
    tmp_path: Path, moto_endpoint: str
) -> None:
    root = Root(tmp_path, moto_endpoint)
    root.write(warm_pool='{ state = "stopped", min_size = 2, max_prepared = 6 }')
    root.apply()
    found = root.warm_pool()
    assert found is not None
    assert (found["PoolState"], found["MinSize"], found["MaxGroupPreparedCapacity"]) == (
        "Stopped",
        2,
        6,
    )
    assert found["InstanceReusePolicy"] == {"ReuseOnScaleIn": False}
    script = root.user_data()
    # The credential is read only once the group puts the instance in service.
    wait = script.index('if [ "$TARGET" = "InService" ]; then')
    assert wait < script.index('--name "$PARAMETER"')
    assert '--lifecycle-hook-name "ci-autoscaler-warm-setup"' in script
    assert "systemctl enable --now ci-autoscaler-runner.service" in script

    root.write(warm_pool="null")
    root.apply()
    assert root.warm_pool() is None
    script = root.user_data()
    assert "target-lifecycle-state" not in script
    assert "exec /usr/local/sbin/ci-autoscaler-runner" in script

    root.write(warm_pool="{}", spot="{ on_demand_base_capacity = 1 }")
    code, out = root.plan()
    assert code != 0
    assert "warm_pool needs an on-demand group" in " ".join(out.split())

    root.write(warm_pool="{ reuse = true }")  # the pool is ephemeral
    code, out = root.plan()
    assert code != 0
    assert 'warm_pool.reuse needs mode = "persistent"' in " ".join(out.split())
