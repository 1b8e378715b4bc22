"""The module map: every module of the package with the first sentence of its docstring.

Read from the source tree (``ast``, nothing imported), so the map is the tree as it is.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from docgen.markdown import GENERATED, cell, code, table

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "autoscaler"


def summary(path: Path) -> str:
    """The docstring's first sentence (its first paragraph when no sentence ends)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    return match.group(1) if match else paragraph


def render() -> str:
    parts = [
        "# Module map",
        "",
        GENERATED.format(source="the docstrings of autoscaler/"),
        "",
        "Every module of the `autoscaler` package, by folder, with the first sentence of its"
        " docstring. [Development](../development.md#the-layout) says how the folders"
        " fit together.",
    ]
    folders = sorted({p.parent for p in PACKAGE.rglob("*.py")})
    for folder in folders:
        rel = folder.relative_to(REPO).as_posix()
        rows = [
            [code(p.name), cell(summary(p))]
            for p in sorted(folder.glob("*.py"))
            if p.name != "__init__.py" or summary(p)
        ]
        parts += ["", f"## `{rel}/`", ""]
        init = folder / "__init__.py"
        if init.exists() and summary(init):
            parts += [cell(summary(init)), ""]
            rows = [r for r in rows if r[0] != code("__init__.py")]
        parts.append(table(["Module", "What it is for"], rows))
    return "\n".join(parts) + "\n"
