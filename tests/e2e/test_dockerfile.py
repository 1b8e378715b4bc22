"""The Dockerfile, kept honest without a Docker engine.

hadolint lints it; then the builder stage's COPY and RUN steps are replayed under a fake
root in tmp_path (every absolute path the Dockerfile names is mapped below that root), and
the final stage's ENTRYPOINT and CMD run from the virtualenv those steps built.
"""

from __future__ import annotations

import http.server
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths
from dockerfile_parse import DockerfileParser

from tests.conftest import free_port, require_tool

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
EXAMPLE_CONFIG = REPO / "config.example.yaml"
STATE_DIR = "/var/lib/ci-autoscaler"


@dataclass
class Stage:
    base: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [args for instr, args in self.steps if instr == instruction]

    def last(self, instruction: str) -> str:
        found = self.all(instruction)
        assert found, f"stage {self.name or self.base!r} has no {instruction}"
        return found[-1]

    def env(self) -> dict[str, str]:
        """The stage's ENV, values as written (``$VAR`` not expanded)."""
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            for token in shlex.split(args):
                key, sep, value = token.partition("=")
                assert sep, f"use ENV KEY=VALUE, got {token!r}"
                out[key] = value
        return out


def parse_dockerfile(path: Path) -> list[Stage]:
    """Instructions grouped by stage, as dockerfile-parse reads them (continuation lines
    joined, comments apart)."""
    stages: list[Stage] = []
    for item in DockerfileParser(path=str(path)).structure:
        instruction, args = str(item["instruction"]).upper(), str(item["value"]).strip()
        if instruction == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif instruction != "COMMENT" and stages:
            stages[-1].steps.append((instruction, args))
    return stages


def expand(value: str, env: dict[str, str]) -> str:
    for key in sorted(env, key=len, reverse=True):
        value = value.replace("${" + key + "}", env[key]).replace("$" + key, env[key])
    return value


class FakeRoot:
    """Maps the image's absolute paths below a directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, image_path: str) -> Path:
        return self.root / image_path.lstrip("/")

    def remap(self, value: str) -> str:
        """Absolute paths, and PATH-like lists of them, that the replay created."""
        parts = value.split(":")
        out = []
        for part in parts:
            top = part.lstrip("/").split("/", 1)[0]
            if part.startswith("/") and top and self.path("/" + top).exists():
                out.append(str(self.path(part)))
            else:
                out.append(part)
        return ":".join(out)


def build_context() -> set[str]:
    """The files Docker sends to the builder: the repository less what ``.dockerignore``
    excludes, by Docker's own rules (docker-py's ``exclude_paths``)."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return {p for p in exclude_paths(str(REPO), patterns) if (REPO / p).is_file()}


def copy_into(src: Path, dest: Path, context: set[str]) -> None:
    """COPY ``src`` (a file or a directory of the build context) to ``dest``."""
    if src.is_file():
        assert src.relative_to(REPO).as_posix() in context, f"COPY {src}: not in the context"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        return
    for path in sorted(src.rglob("*")):
        if path.is_file() and path.relative_to(REPO).as_posix() in context:
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def base_python_dir(tmp: Path) -> Path:
    """A directory whose ``python`` is a plain interpreter (not this test's virtualenv)."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    shim = tmp / "base-python-bin"
    shim.mkdir()
    (shim / "python").symlink_to(base)
    return shim


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE)


@pytest.fixture(scope="module")
def image(
    stages: list[Stage], tmp_path_factory: pytest.TempPathFactory
) -> tuple[FakeRoot, dict[str, str]]:
    """Replay the builder stage; return the fake root and the final stage's environment."""
    tmp = tmp_path_factory.mktemp("image")
    root = FakeRoot(tmp / "root")
    root.root.mkdir()
    builder, final = stages[0], stages[-1]
    context = build_context()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME"))}
    env["PATH"] = f"{base_python_dir(tmp)}:{env['PATH']}"
    workdir = root.path("/")
    for instruction, args in builder.steps:
        if instruction == "ENV":
            for token in shlex.split(args):
                key, _, value = token.partition("=")
                value = expand(value, env)
                env[key] = str(root.path(value)) if value.startswith("/") else value
        elif instruction == "WORKDIR":
            workdir = root.path(args)
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction == "COPY":
            *sources, dest = shlex.split(args)
            assert not any(s.startswith("--") for s in sources), "builder COPY takes no flags"
            for src in sources:
                assert (REPO / src).exists(), f"COPY {src}: not in the build context"
                target = workdir / dest
                if (REPO / src).is_file() and dest.endswith("/"):
                    target = target / Path(src).name
                copy_into(REPO / src, target, context)
        elif instruction == "RUN":
            for directory in ("/tmp",):
                root.path(directory).mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                ["/bin/sh", "-c", args],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
            assert done.returncode == 0, f"RUN {args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for args in final.all("COPY"):
        words = shlex.split(args)
        assert words[0] == "--from=builder", f"final stage copies only from the builder: {args}"
        assert root.path(words[1]).is_dir(), f"{words[1]} was not built"
    root.path(STATE_DIR).mkdir(parents=True, exist_ok=True)
    final_env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    for key, raw in final.env().items():
        value = expand(raw, final_env)
        final_env[key] = root.remap(value) if key == "PATH" or value.startswith("/") else value
    return root, final_env


def entrypoint(stages: list[Stage]) -> list[str]:
    value = json.loads(stages[-1].last("ENTRYPOINT"))
    assert isinstance(value, list)
    return [str(v) for v in value]


def files_outside_state(root: FakeRoot) -> set[Path]:
    """Every file of the image but the state volume (a read-only root must stay unchanged)."""
    state = root.path(STATE_DIR)
    return {p for p in root.root.rglob("*") if state not in p.parents and p != state}


def run_image(
    image: tuple[FakeRoot, dict[str, str]], argv: list[str], extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    root, env = image
    return subprocess.run(
        argv,
        cwd=root.path(STATE_DIR),
        env={**env, **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_hadolint_is_clean() -> None:
    hadolint = REPO / ".venv" / "bin" / "hadolint"
    tool = str(hadolint) if hadolint.exists() else require_tool("hadolint")
    done = subprocess.run([tool, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_final_stage_is_shaped_as_the_issue_asks(stages: list[Stage]) -> None:
    assert len(stages) >= 2, "multi-stage: a builder and a final stage"
    final = stages[-1]
    assert final.base == stages[0].base, "final stage must share the builder's base (venv links)"
    assert entrypoint(stages) == ["ci-autoscaler"]
    assert json.loads(final.last("CMD")) == ["run", "--config", "/etc/ci-autoscaler/config.yaml"]
    user = final.last("USER").split(":")[0]
    assert user not in ("root", "0"), "the image runs as a non-root user"
    assert "9464" in final.last("EXPOSE").split()
    assert STATE_DIR in json.loads(final.last("VOLUME"))
    assert final.env().get("PYTHONDONTWRITEBYTECODE") == "1"
    labels = " ".join(final.all("LABEL"))
    for label in ("title", "description", "version", "revision", "licenses"):
        assert f"org.opencontainers.image.{label}=" in labels
    assert not final.all("RUN") or all("pip" not in run for run in final.all("RUN")), (
        "the final stage installs nothing; it copies the builder's venv"
    )


def test_healthcheck_uses_python_against_healthz(stages: list[Stage]) -> None:
    check = stages[-1].last("HEALTHCHECK")
    _, _, command = check.partition("CMD ")
    argv = json.loads(command)
    assert argv[0] == "python"
    assert not any(tool in check for tool in ("curl", "wget"))
    assert stages[-1].env()["HEALTHCHECK_URL"] == "http://127.0.0.1:9464/healthz"


def test_entrypoint_help_runs_from_the_built_venv(
    stages: list[Stage], image: tuple[FakeRoot, dict[str, str]]
) -> None:
    done = run_image(image, [*entrypoint(stages), "--help"])
    assert done.returncode == 0, done.stderr
    for sub in ("run", "once", "check-config", "demo"):
        assert sub in done.stdout


def test_entrypoint_checks_a_copy_of_the_example_config(
    stages: list[Stage], image: tuple[FakeRoot, dict[str, str]]
) -> None:
    """The example alone, copied where the image runs (its state volume, the working
    directory): the rules it needs ship in the package, not in a folder beside it."""
    if not EXAMPLE_CONFIG.exists():
        pytest.fail("config.example.yaml is missing at the repository root")
    root = image[0]
    copy = root.path(STATE_DIR) / "config.yaml"
    copy.write_text(EXAMPLE_CONFIG.read_text())
    before = files_outside_state(root)
    for args, env in (
        (["config.yaml"], {"GITHUB_TOKEN": "ghp_example_not_a_real_token"}),
        (["--allow-unset-env", "config.yaml"], {}),
    ):
        done = run_image(image, [*entrypoint(stages), "check-config", *args], env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "ghp_example_not_a_real_token" not in done.stdout + done.stderr
    assert files_outside_state(root) == before, "wrote outside the state volume"


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("Handler", (_Health,), {"status": 200})
    server = http.server.HTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/healthz", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "healthy"),
    [pytest.param(200, True, id="healthz-200"), pytest.param(503, False, id="healthz-503")],
)
def test_healthcheck_command_follows_healthz(
    stages: list[Stage],
    image: tuple[FakeRoot, dict[str, str]],
    health_server: tuple[str, type[_Health]],
    status: int,
    healthy: bool,
) -> None:
    url, handler = health_server
    handler.status = status
    _, _, command = stages[-1].last("HEALTHCHECK").partition("CMD ")
    done = run_image(image, json.loads(command), {"HEALTHCHECK_URL": url})
    assert (done.returncode == 0) is healthy, done.stderr
