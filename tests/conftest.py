"""What every test may use. One place each; look here before writing a helper.

- :func:`missing`, :func:`require_tool`: a tool a test needs is absent: skip locally, fail
  under ``CI=true``.
- :func:`free_port`: a port for a *subprocess* to listen on. A server in the test process
  binds port 0 itself and reads its port back.
- Hypothesis profiles: ``quick`` (the default) and ``thorough`` (``.ci/run`` selects it with
  ``HYPOTHESIS_PROFILE=thorough``). Properties state no ``max_examples`` of their own: the
  profile sets it, so the same properties run quick locally and thorough in CI.
- moto, one family (every test is safe under pytest-xdist: state is per worker process):

  - in-process, no server: ``moto_in_process`` (a boto3 session; every boto3 call of the
    test goes to moto's backends, emptied first). Class- and module-scoped worlds use
    ``with mock_aws():`` themselves;
  - ``moto_endpoint``: this worker's moto server on 127.0.0.1 (in a process of its own,
    :func:`moto_process`), emptied before the test;
  - ``moto_module_endpoint``: the same server, emptied once for a module whose fixtures
    build a world on it (terraform applies);
  - ``tests/e2e/conftest.py``: ``moto``, a server that runs one request at a time
    (DynamoDB's atomic conditional writes), emptied before the test, for several
    controllers on one table.

  moto's EC2 loads its catalogue of images on every reset (about 1,300 for us-east-1, two
  seconds of CPU per reset here). The tests use moto's 44 default images only
  (``MOTO_AMIS_PATH``, set below before anything imports moto), so a reset costs
  milliseconds.
- ``--cpu-report``: CPU seconds per test, file and fixture setup (:mod:`tests.cpu_report`).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    import boto3

pytest_plugins = ["tests.cpu_report"]

#: Hypothesis: the same properties, only the number of examples changes.
settings.register_profile("quick", max_examples=40)
settings.register_profile("thorough", max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


def missing(message: str) -> NoReturn:
    """Something a test needs is not on this machine: skip locally, fail in CI."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def require_tool(name: str) -> str:
    """The tool's path; skip when missing locally, fail when missing in CI."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed (.ci/run installs it)")
    return path


def free_port() -> int:
    """An unused TCP port on 127.0.0.1, for a subprocess's config (it cannot report a port
    it bound itself). The kernel hands ports out at random, so pytest-xdist's workers do
    not pick the same one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _moto_default_images() -> None:
    """Point moto's EC2 at its own 44 default images (no per-region catalogues), for this
    process and every subprocess, unless the caller chose a catalogue. The file is moto's,
    unpacked once per moto version (moto reads it with a plain ``open``)."""
    if "MOTO_AMIS_PATH" in os.environ:
        return
    spec = importlib.util.find_spec("moto")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return
    packed = Path(next(iter(spec.submodule_search_locations))) / "ec2/resources/amis.json.gz"
    data = packed.read_bytes()
    target = Path(tempfile.gettempdir()) / f"moto-amis-{hashlib.sha256(data).hexdigest()[:16]}.json"
    if not target.exists():
        part = target.with_suffix(f".{os.getpid()}.part")
        part.write_bytes(gzip.decompress(data))
        part.replace(target)  # atomic: parallel workers never read half a file
    os.environ["MOTO_AMIS_PATH"] = str(target)


_moto_default_images()  # at import: this file is imported before any test module or conftest


_MOTO_MAIN = (
    "import sys\n"
    "from autoscaler.sim.fleet import start_moto_server\n"
    "server, endpoint = start_moto_server(atomic=sys.argv[1] == 'atomic')\n"
    "print(endpoint, flush=True)\n"
    "sys.stdin.read()\n"  # until the parent closes stdin (or dies)
    "server.stop()\n"
)


@contextmanager
def moto_process(*, atomic: bool = False) -> Iterator[str]:
    """moto's server in a process of its own (its endpoint URL): a server in the test's
    process shares one interpreter lock with the test, the fake GitHub and the fleet, and
    on a loaded machine its answers came later than the clients' timeouts. ``atomic``:
    one request at a time (DynamoDB's conditional writes are atomic, moto's threaded ones
    are not: see :func:`autoscaler.sim.fleet.start_moto_server`)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _MOTO_MAIN, "atomic" if atomic else "threaded"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:"), endpoint
        yield endpoint
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _reset(endpoint: str) -> None:
    from autoscaler.sim.fleet import reset_moto_server  # noqa: PLC0415

    reset_moto_server(endpoint)


@pytest.fixture
def moto_in_process() -> Iterator[boto3.session.Session]:
    """moto without a server, for the test: a boto3 session with dummy credentials (any
    boto3 client made during the test reaches moto, emptied before it)."""
    from moto import mock_aws  # noqa: PLC0415

    from autoscaler.sim.fleet import moto_session  # noqa: PLC0415

    with mock_aws():
        yield moto_session()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """This worker's moto server on 127.0.0.1 (its endpoint URL), as it is: not emptied.
    Use :func:`moto_endpoint` or :func:`moto_module_endpoint`."""
    with moto_process() as endpoint:
        yield endpoint


@pytest.fixture
def moto_endpoint(moto_server: str) -> str:
    """This worker's moto server, emptied before the test (moto's state is per process)."""
    _reset(moto_server)
    return moto_server


@pytest.fixture(scope="module")
def moto_module_endpoint(moto_server: str) -> Iterator[str]:
    """This worker's moto server, emptied before the module's first test and after its
    last: for module fixtures that build on it once."""
    _reset(moto_server)
    try:
        yield moto_server
    finally:
        _reset(moto_server)
