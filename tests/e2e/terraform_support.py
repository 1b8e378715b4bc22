"""Running terraform offline in tests: the provider mirror is discovered, never hard-coded."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = REPO / "terraform"
PROVIDER_GLOB = "terraform-provider-aws_*"
_SKIP = {"/proc", "/sys", "/dev", "/run"}


@functools.cache
def provider_mirror() -> Path | None:
    """The directory holding ``registry.terraform.io/`` with the AWS provider, or None.

    ``TF_PROVIDER_MIRROR`` names it explicitly; otherwise the filesystem is searched.
    """
    explicit = os.environ.get("TF_PROVIDER_MIRROR")
    if explicit:
        return Path(explicit)
    for top, dirs, files in os.walk("/", followlinks=False):
        if top in _SKIP or "/.git" in top or "/node_modules" in top:
            dirs[:] = []
            continue
        if any(Path(f).match(PROVIDER_GLOB) for f in files):
            here = Path(top)
            for parent in (here, *here.parents):
                if parent.name == "registry.terraform.io":
                    return parent.parent
    return None


def terraform_env(home: Path) -> dict[str, str]:
    """An environment where terraform reads no user config and phones no one."""
    rc = home / "terraformrc"
    rc.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "AWS_"))}
    env.update(
        TF_CLI_CONFIG_FILE=str(rc),
        TF_IN_AUTOMATION="1",
        TF_INPUT="0",
        CHECKPOINT_DISABLE="1",
        HOME=str(home),
    )
    return env


def copy_tree(dest: Path) -> Path:
    """A copy of terraform/ (so relative module sources resolve and no .terraform lands)."""
    target = dest / "terraform"
    shutil.copytree(
        TERRAFORM_DIR,
        target,
        ignore=shutil.ignore_patterns(".terraform", ".terraform.lock.hcl", "*.tfstate*"),
    )
    return target


def run(
    terraform: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [terraform, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def init(terraform: str, cwd: Path, env: dict[str, str], mirror: Path) -> None:
    done = run(
        terraform, ["init", "-backend=false", f"-plugin-dir={mirror}", "-no-color"], cwd, env
    )
    assert done.returncode == 0, done.stdout + done.stderr


MOTO_REGION = "us-east-1"
MOTO_SERVICES = ("autoscaling", "ec2", "ecs", "iam", "logs", "sts", "ssm")


def moto_provider(endpoint: str, region: str = MOTO_REGION) -> str:
    """An ``aws`` provider block (or override) that talks only to moto at ``endpoint``."""
    endpoints = "\n".join(f'    {s:<11} = "{endpoint}"' for s in MOTO_SERVICES)
    return f"""provider "aws" {{
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
"""
