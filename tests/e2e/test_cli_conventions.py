"""The CLI's conventions, as a script meets them: one exit code per meaning, ``--config``
everywhere (``CI_AUTOSCALER_CONFIG`` when absent), ``-o json`` printing one object.

Story: exit code 2 meant both an argparse usage error and "GitHub unreadable" for
``once`` and ``explain``, so a script could not tell a typo from an outage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.fakes.github import FakeGitHub
from tests.conftest import free_port
from tests.e2e.harness import ONE_TICK, cli, seeded_github, write_config

pytestmark = pytest.mark.e2e

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGitHub]:
    fake = seeded_github(gpu_jobs=1, gpu_age_minutes=1)
    try:
        yield fake
    finally:
        fake.stop()


def configs(tmp: Path, github_url: str) -> dict[str, Path]:
    """Configs by what they make a command meet."""
    out: dict[str, Path] = {}
    for name, url, extra in (
        ("good", github_url, {}),
        ("github-down", f"http://127.0.0.1:{free_port()}", {}),
        (
            "cloud-down",
            github_url,
            {
                "scaling": {"enabled": True},
                "runner_types": {
                    "linux.4xlarge": {
                        "labels": ["self-hosted", "linux.4xlarge"],
                        "pools": ["ci-cpu"],
                    }
                },
                "aws": {
                    "region": "us-east-1",
                    "endpoint_url": f"http://127.0.0.1:{free_port()}",
                    "retry": {"max_attempts": 1, "deadline": "2s"},
                },
            },
        ),
    ):
        (tmp / name).mkdir()
        out[name] = write_config(tmp / name, url, free_port(), **ONE_TICK, **extra)
    bad = tmp / "bad.yaml"
    bad.write_text("github: {owner: x}\nrunner_types: {cpu: {labels: []}}\n")
    out["bad"] = bad
    return out


# (id, argv with {good}/{bad}/... for the configs, environment, exit code)
EXIT_CODES = [
    ("ok-once", ["once", "--config", "{good}"], {}, 0),
    ("ok-check-config-positional", ["check-config", "{good}"], {}, 0),
    ("ok-check-config-option", ["check-config", "--config", "{good}"], {}, 0),
    ("ok-config-from-environment", ["once"], {"CI_AUTOSCALER_CONFIG": "{good}"}, 0),
    ("ok-check-config-from-environment", ["check-config"], {"CI_AUTOSCALER_CONFIG": "{good}"}, 0),
    ("invalid-config", ["check-config", "--config", "{bad}"], {}, 1),
    ("invalid-config-once", ["once", "--config", "{bad}"], {}, 1),
    ("usage-misspelt-option", ["once", "--confg", "{good}"], {}, 2),
    ("usage-no-config", ["once"], {}, 2),
    ("usage-check-config-no-file", ["check-config"], {}, 2),
    ("usage-unknown-runner-type", ["explain", "nosuch", "--config", "{good}"], {}, 2),
    ("usage-unknown-receiver", ["alerts", "test", "nosuch", "--config", "{good}"], {}, 2),
    ("github-unreachable-once", ["once", "--config", "{github-down}"], {}, 3),
    ("github-unreachable-explain", ["explain", "--config", "{github-down}"], {}, 3),
    ("cloud-unreachable-once", ["once", "--config", "{cloud-down}", "--dry-run"], AWS_ENV, 4),
]


@pytest.mark.parametrize(
    ("argv", "env", "code"), [pytest.param(*row[1:], id=row[0]) for row in EXIT_CODES]
)
def test_one_exit_code_per_meaning(
    tmp_path: Path, github: FakeGitHub, argv: list[str], env: dict[str, str], code: int
) -> None:
    paths = {k: str(v) for k, v in configs(tmp_path, github.url).items()}
    done = cli(
        *(a.format(**paths) for a in argv),
        env={"CI_AUTOSCALER_CONFIG": "", **{k: v.format(**paths) for k, v in env.items()}},
        timeout=120,
    )
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("config", "flag", "valid", "code"),
    [
        pytest.param("good", "--output", True, 0, id="valid"),
        pytest.param("good", "-o", True, 0, id="valid-short-flag"),
        pytest.param("bad", "--output", False, 1, id="invalid"),
    ],
)
def test_check_config_json_prints_one_object(
    tmp_path: Path, github: FakeGitHub, config: str, flag: str, valid: bool, code: int
) -> None:
    path = configs(tmp_path, github.url)[config]
    done = cli("check-config", "--config", str(path), flag, "json")
    assert done.returncode == code, done.stderr
    report = json.loads(done.stdout)  # one object, nothing else on stdout
    assert isinstance(report, dict)
    assert (report["file"], report["valid"]) == (str(path), valid)
    assert bool(report["problems"]) is not valid
    if not valid:
        assert "line 1: github: needs either token or app" in report["problems"]
