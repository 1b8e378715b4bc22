"""Ctrl-C while the command is still importing its modules: one line, exit code 130.

The moment is made deterministic, not guessed with a sleep: the child runs with Python's
``-X importtime`` report (``PYTHONPROFILEIMPORTTIME``), which writes one line to stderr as
each module finishes importing, into a pipe shrunk to one page. The test reads that
report byte by byte until the first module the CLI itself brings in, then stops reading:
the child can write at most one more page before its next import line blocks, and the
CLI's imports write far more than that. Once the pipe is full the child is stalled in
the middle of the import; SIGINT is sent then.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.e2e.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux; the constant is 1031
#: Modules imported before the CLI's own imports start (the entry point and its packages).
BEFORE_CLI = {"autoscaler", "autoscaler.app", "autoscaler.app.entry"}


def console_script() -> list[str]:
    """The command pip writes for ``[project.scripts] ci-autoscaler`` (same shape: it
    imports the function at its top, then calls it), built from pyproject.toml, so the
    test checks the declared entry point whatever the venv was installed from."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        target = tomllib.load(f)["project"]["scripts"]["ci-autoscaler"]
    module, func = target.split(":")
    code = f"import re\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n"
    return [sys.executable, "-c", code]


def _read_line(fd: int) -> bytes:
    """One line of the child's stderr, read a byte at a time (nothing past it is taken
    out of the pipe, so the pipe's one page is all the child may write ahead)."""
    out = bytearray()
    while not out.endswith(b"\n"):
        b = os.read(fd, 1)
        if not b:
            break
        out += b
    return bytes(out)


def _blocked_writing_a_pipe(pid: int) -> bool:
    """The child sleeps in the kernel's pipe write: its pipe is full. Not a byte count:
    a line that does not fit blocks whole, so a full pipe can hold any amount less than
    a page (an import line of a deeply nested module is over 200 bytes)."""
    try:
        return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(console_script(), id="console-script"),
        pytest.param([sys.executable, "-m", "autoscaler"], id="python-m-autoscaler"),
    ],
)
def test_ctrl_c_while_the_cli_is_still_importing_is_one_line_and_130(command: list[str]) -> None:
    """From the closing note: Ctrl-C in the first half second of `ci-autoscaler ...`
    printed a KeyboardInterrupt traceback. The console script imported
    ``autoscaler.app.cli`` (half a second of imports) at its top, outside the handler
    ``cli.main`` has for Ctrl-C. The script's target is now ``autoscaler.app.entry``,
    which imports the CLI inside its handler."""
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(read_fd, F_SETPIPE_SZ, PAGE)
        proc = subprocess.Popen(
            # a command that imports plenty (the config's models): a usage error or
            # --help imports too little now to fill the pipe
            [*command, "check-config", str(ROOT / "config.example.yaml")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=write_fd,
            env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
            cwd=ROOT,
        )
    finally:
        os.close(write_fd)
    try:
        report: list[bytes] = []
        while True:  # up to the first module of the CLI's own imports
            line = _read_line(read_fd)
            assert line, f"the child ended before importing the CLI: {b''.join(report)!r}"
            report.append(line)
            module = line.rsplit(b"|", 1)[-1].strip().decode()
            if module.startswith("autoscaler.") and module not in BEFORE_CLI:
                break
        wait_for(
            lambda: proc.poll() is not None or _blocked_writing_a_pipe(proc.pid),
            20,
            "the child to stall on its full stderr pipe, mid-import",
        )
        assert proc.poll() is None, "the CLI finished importing before the pipe filled"
        proc.send_signal(signal.SIGINT)
        rest = bytearray()
        while chunk := os.read(read_fd, 65536):
            rest += chunk
        proc.wait(timeout=30)
    finally:
        os.close(read_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = [
        line
        for line in rest.decode(errors="replace").splitlines()
        if not line.startswith("import time:")
    ]
    assert said == ["interrupted"], said
    assert proc.returncode == 130
