"""Where GitHub's published references are once fetched, and what a test does without them.

``references.txt`` pins each npm package and names the one file kept from it;
``fetch_references.sh`` (run by ``make test`` and ``.ci/run``) puts that file in
``.cache/octokit/<package>-<version>/``. A test asking for a reference that is not there
skips locally and fails under ``CI=true``, like :func:`tests.conftest.require_tool`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import missing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PINS = HERE / "references.txt"
CACHE = ROOT / ".cache" / "octokit"

OPENAPI = "@octokit/openapi"
WEBHOOK_EXAMPLES = "@octokit/webhooks-examples"
WEBHOOK_SCHEMAS = "@octokit/webhooks-schemas"


@dataclass(frozen=True)
class Pin:
    """One pinned package: its npm name, version and the file kept from it."""

    name: str
    version: str
    file: str

    @property
    def path(self) -> Path:
        short = self.name.rsplit("/", 1)[-1]
        return CACHE / f"{short}-{self.version}" / Path(self.file).name


@functools.cache
def pins() -> dict[str, Pin]:
    """The pins of ``references.txt`` by package name."""
    found = {}
    for line in PINS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, version, file = line.split()
            found[name] = Pin(name, version, file)
    return found


def require_reference(name: str) -> Path:
    """The cached file of package ``name``; skips locally, fails under CI=true."""
    pin = pins()[name]
    if not pin.path.is_file():
        missing(
            f"{pin.name}@{pin.version} is not in {CACHE.relative_to(ROOT)} "
            "(run `make references`; it needs npm and the npm registry once)"
        )
    return pin.path
