"""``python -m docgen`` writes the generated reference pages; ``--check`` only compares.

Exit 0 when every page is (now) current, 1 with ``--check`` when one is stale.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from autoscaler.config import json_schema
from docgen import alerts, cli, configuration, metrics, modules

REPO = Path(__file__).resolve().parents[1]


#: Each generated page (relative to the repository) and what renders it.
PAGES: Mapping[str, Callable[[], str]] = {
    "docs/reference/configuration.md": lambda: configuration.render(json_schema()),
    "docs/reference/metrics.md": metrics.render,
    "docs/reference/alerts.md": alerts.render,
    "docs/reference/cli.md": cli.render,
    "docs/reference/modules.md": modules.render,
}


def stale() -> list[str]:
    """The pages whose file differs from what the code renders now."""
    out = []
    for page, render in PAGES.items():
        path = REPO / page
        if not path.exists() or path.read_text(encoding="utf-8") != render():
            out.append(page)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        for page in found:
            print(f"{page} is stale: run `make docs`", file=sys.stderr)
        return 1 if found else 0
    for page, render in PAGES.items():
        path = REPO / page
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
