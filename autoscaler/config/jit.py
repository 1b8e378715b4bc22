"""The ``jit`` section and the per-type ``mode``: how ephemeral runners are handed their
just-in-time (JIT) configuration.

```yaml
jit:
  parameter_path: /ci-autoscaler/jit   # SSM SecureStrings <path>/<pool>/<instance id>
  work_folder: _work                   # the runner's work folder on the instance
runner_types:
  gpu:
    mode: ephemeral                    # one job per machine, registered just in time
    runner_group_id: 1                 # GitHub runner group (1: Default)
```

``mode`` is read per runner type. An ephemeral type's instances get one JIT config each
(``POST .../actions/runners/generate-jitconfig``), stored under :attr:`JitConfig.parameter_path`
where only that instance may read it; the controller itself never hands a GitHub credential
to a machine. The section only matters when some type is ephemeral.

Why ``persistent`` stays the schema default although ``ephemeral`` is what new configs
should use (``config.example.yaml``, the README's config and the Terraform example all say
``mode: ephemeral``): a config written before this key existed describes machines that
register their own runner. Read as ephemeral, the controller would register a second
runner for each of them. An existing file keeps its meaning; a new one says what it wants.
"""

from __future__ import annotations

from typing import Annotated

from autoscaler.config.values import Section, Text

#: The runner modes a type may ask for.
EPHEMERAL, PERSISTENT = "ephemeral", "persistent"
MODES = (EPHEMERAL, PERSISTENT)
#: ``mode`` when a runner type does not say (see the module docstring for why).
DEFAULT_MODE = PERSISTENT
#: GitHub's runner group "Default".
DEFAULT_RUNNER_GROUP_ID = 1

_PATH = r"^(/[A-Za-z0-9_.\-]+)+$"


class JitConfig(Section):
    """Where ephemeral runners' just-in-time configurations are handed to instances."""

    parameter_path: Annotated[
        str,
        Text(
            _PATH,
            "an SSM parameter path such as /ci-autoscaler/jit (a leading '/', letters,"
            " digits, '_', '.', '-', no trailing '/')",
        ),
    ] = "/ci-autoscaler/jit"
    """SSM Parameter Store path: an instance's config is the SecureString
    `<parameter_path>/<pool>/<instance id>`. The controller's role may write and delete
    under this path only; each instance may read its own parameter only."""
    work_folder: Annotated[str, Text()] = "_work"
    """The runner's work folder, relative to its install directory (GitHub's
    `work_folder`)."""

    def parameter_name(self, pool: str, instance_id: str) -> str:
        """The SSM parameter an instance of ``pool`` reads its JIT config from."""
        return f"{self.parameter_path}/{pool}/{instance_id}"
