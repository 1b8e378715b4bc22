"""Running terraform offline in tests: the provider mirror is discovered, never hard-coded."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = REPO / "terraform"
PROVIDER_GLOB = "registry.terraform.io/hashicorp/aws/*/*/terraform-provider-aws_*"


def _cli_config_dirs() -> list[tuple[str, Path]]:
    """``plugin_cache_dir`` and ``filesystem_mirror`` paths of terraform's CLI config."""
    rc = os.environ.get("TF_CLI_CONFIG_FILE") or str(Path.home() / ".terraformrc")
    try:
        text = Path(rc).read_text(encoding="utf-8")
    except OSError:
        return []
    import hcl2  # noqa: PLC0415 (a dev dependency, only needed here)

    try:
        doc = hcl2.loads(text)
    except Exception:  # a broken CLI config is terraform's to report, not ours
        return []
    out: list[tuple[str, Path]] = []
    if "plugin_cache_dir" in doc:
        out.append((f"{rc}: plugin_cache_dir", Path(str(doc["plugin_cache_dir"]))))
    for block in doc.get("provider_installation", []):
        for mirror in block.get("filesystem_mirror", []):
            if "path" in mirror:
                out.append((f"{rc}: filesystem_mirror", Path(str(mirror["path"]))))
    return out


def mirror_candidates() -> list[tuple[str, Path]]:
    """Where terraform (and this project) documents a local provider mirror, in order.

    ``TF_PLUGIN_DIR`` (set by the Makefile and ``.ci/run``, which discover the mirror once),
    the CLI config's ``plugin_cache_dir`` and ``filesystem_mirror`` paths, and terraform's
    implied local mirror directories (``~/.terraform.d/plugins``, then
    ``$XDG_DATA_HOME/terraform/plugins`` and each ``$XDG_DATA_DIRS/terraform/plugins``).
    """
    home = Path.home()
    out: list[tuple[str, Path]] = []
    if os.environ.get("TF_PLUGIN_DIR"):
        out.append(("TF_PLUGIN_DIR", Path(os.environ["TF_PLUGIN_DIR"])))
    out += _cli_config_dirs()
    out.append(("implied", home / ".terraform.d" / "plugins"))
    data_home = os.environ.get("XDG_DATA_HOME") or str(home / ".local" / "share")
    data_dirs = os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    for base in [data_home, *data_dirs.split(":")]:
        if base:
            out.append(("implied", Path(base) / "terraform" / "plugins"))
    return out


@functools.cache
def provider_mirror() -> Path | None:
    """The first documented place holding ``registry.terraform.io/hashicorp/aws/...``."""
    for _, path in mirror_candidates():
        if any(path.glob(PROVIDER_GLOB)):
            return path
    return None


def require_provider_mirror() -> Path:
    """The mirror, or a failure naming every place looked at (no filesystem walk)."""
    mirror = provider_mirror()
    if mirror is None:
        places = "\n".join(f"  {why}: {path}" for why, path in mirror_candidates())
        pytest.fail(
            "no terraform AWS provider mirror (registry.terraform.io/hashicorp/aws/...) in:\n"
            f"{places}\nset TF_PLUGIN_DIR to the directory holding registry.terraform.io/"
        )
    return mirror


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
MOTO_SERVICES = (
    "autoscaling",
    "dynamodb",
    "ec2",
    "ecs",
    "elbv2",
    "events",
    "iam",
    "logs",
    "sqs",
    "sts",
    "ssm",
)


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
