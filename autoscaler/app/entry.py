"""The ``ci-autoscaler`` command's entry point: Ctrl-C at any moment is a clean exit.

The CLI imports a lot before it can parse an argument (prometheus_client, httpx, yaml,
the adapters): about half a second. The console script pip writes imports the function
it calls at its top, outside any handler, so a Ctrl-C in that half second printed a
KeyboardInterrupt traceback instead of :func:`autoscaler.app.cli.main`'s one line. This
module imports only ``sys``, so the script's own import is instant, and imports the CLI
inside :func:`main`'s handler. (What is left is Python's own start-up before the script
runs: a few milliseconds.)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: The exit code of a command stopped by Ctrl-C: the shell's 128 + SIGINT.
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Import and run the CLI; a KeyboardInterrupt at any point is one line and 130."""
    try:
        from autoscaler.app import cli  # noqa: PLC0415 (imported under the handler, see above)

        return cli.main(argv)
    except KeyboardInterrupt:
        return interrupted()


def interrupted() -> int:
    """Say the command was interrupted (one line, no traceback); the exit code to use."""
    print("interrupted", file=sys.stderr)
    return INTERRUPTED
