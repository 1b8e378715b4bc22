"""The configuration's JSON Schema: what editors check a file against as it is written.

It is generated from the models ``check-config`` reads a file with, so the two must agree:
the shipped ``config.schema.json`` is the current output of ``ci-autoscaler config
schema``; the example and every whole config in the docs validate against it; and the
mistakes it can see are refused by both, at the same line.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from autoscaler.app.cli import main
from autoscaler.config import json_schema
from autoscaler.config.yamlfile import read_yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "config.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def test_the_shipped_schema_is_what_config_schema_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Regenerate with ``ci-autoscaler config schema > config.schema.json``."""
    assert main(["config", "schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json_schema()
    assert printed == SCHEMA, "config.schema.json is stale: regenerate it"
    jsonschema.Draft202012Validator.check_schema(printed)


def test_the_example_points_editors_at_the_schema() -> None:
    first = (REPO / "config.example.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=./config.schema.json"


def _sections(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("Config", schema), *schema["$defs"].items()]


@pytest.mark.parametrize(
    ("section", "body"), _sections(SCHEMA), ids=[name for name, _ in _sections(SCHEMA)]
)
def test_every_key_is_described_typed_and_closed(section: str, body: dict[str, Any]) -> None:
    """The docs' configuration reference is generated from the schema: every key needs
    its sentence and its type, and a mapping takes no key it does not list."""
    assert body.get("additionalProperties") is False, f"{section} takes unknown keys"
    assert body.get("description"), f"{section} has no description"
    typeless = [
        key
        for key, prop in body["properties"].items()
        if not prop.get("description")
        or not any(k in prop for k in ("type", "$ref", "anyOf", "enum"))
    ]
    assert typeless == [], f"{section}: keys without a description or a type: {typeless}"


def _docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _yaml_blocks() -> list[tuple[str, Any]]:
    blocks = []
    for doc in _docs():
        text = doc.read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)):
            blocks.append((f"{doc.relative_to(REPO)}#{i}", yaml.safe_load(block)))
    return blocks


def _whole_configs() -> list[tuple[str, Any]]:
    example = yaml.safe_load((REPO / "config.example.yaml").read_text(encoding="utf-8"))
    whole = [
        (name, block)
        for name, block in _yaml_blocks()
        if isinstance(block, dict) and {"github", "runner_types"} <= set(block)
    ]
    return [("config.example.yaml", example), *whole]


WHOLE = _whole_configs()


@pytest.mark.parametrize(("name", "doc"), WHOLE, ids=[name for name, _ in WHOLE])
def test_the_example_and_every_whole_config_in_the_docs_validate(name: str, doc: Any) -> None:
    assert len(WHOLE) >= 2, "no whole config found in the docs: the finder is wrong"
    errors = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)
    ]
    assert errors == []


BASE: dict[str, Any] = {
    "github": {"owner": "my-org", "token": "x"},
    "runner_types": {"linux.4xlarge": {"labels": ["self-hosted", "linux.4xlarge"]}},
}


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


#: Top-level keys of other programs' configs the docs show: Alertmanager's, Prometheus's.
NOT_OURS = ("route", "scrape_configs", "global")
FRAGMENTS = [
    (name, block)
    for name, block in _yaml_blocks()
    if isinstance(block, dict) and not any(key in block for key in NOT_OURS)
]


@pytest.mark.parametrize(("name", "block"), FRAGMENTS, ids=[name for name, _ in FRAGMENTS])
def test_every_config_fragment_in_the_docs_validates_too(name: str, block: Any) -> None:
    doc = _merge(copy.deepcopy(BASE), block)
    errors = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)
    ]
    assert errors == []


GOOD = """\
github:
  owner: my-org
  token: t
runner_types:
  cpu:
    labels: [self-hosted, linux.4xlarge]
    max: 10
poll_interval: 30s
"""


@pytest.mark.parametrize(
    ("good", "bad", "expected"),
    [
        pytest.param(
            "poll_interval: 30s\n",
            "pol_interval: 30s\n",
            "line 8: pol_interval: unknown key (did you mean 'poll_interval'?)",
            id="unknown-key",
        ),
        pytest.param(
            "poll_interval: 30s\n",
            "poll_interval: 30\n",
            "line 8: poll_interval: must be a duration like 30s, 5m or 4h, got 30: "
            "a bare number has no unit (write 30s for seconds, 30m for minutes)",
            id="bare-number-duration",
        ),
        pytest.param(
            "    max: 10\n",
            "    max: -3\n",
            "line 7: runner_types.cpu.max: must be >= 0, got -3",
            id="negative-max",
        ),
    ],
)
def test_the_schema_and_check_config_refuse_the_same_mistake_at_the_same_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], good: str, bad: str, expected: str
) -> None:
    """What an editor underlines is what ``check-config`` says, on the same line."""
    path = tmp_path / "c.yaml"
    path.write_text(GOOD.replace(good, bad))
    assert main(["check-config", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"{path}: 1 problem:", f"  {expected}"]
    doc = read_yaml(path)
    [error] = VALIDATOR.iter_errors(doc.data)
    where = ".".join(str(step) for step in error.absolute_path)
    if error.validator == "additionalProperties":  # the schema names the mapping, and the key
        [key] = re.findall(r"'(\w+)' was unexpected", error.message)
        where = f"{where}.{key}" if where else key
    assert expected.startswith(f"line {doc.lines[where]}: {where}: ")


def test_the_cli_help_imports_no_pydantic() -> None:
    """pydantic is for reading a config: ``--help`` (every command's parser) never pays
    for it."""
    code = (
        "import sys\nfrom autoscaler.app.cli import build_parser\nbuild_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
