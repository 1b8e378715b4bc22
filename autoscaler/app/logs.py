"""Logging for the CLI: one handler on the root logger, and every secret out of every line.

:class:`Redactor` is a filter on the root logger's handlers. A record reaches it from any
logger (ours, httpx's, botocore's at DEBUG with its request bodies, any library's), and it
replaces, by value, whatever a live :class:`~autoscaler.secrets.Secret` holds (the
GitHub token or App key, installation tokens, receiver URLs and their basic-auth, the
webhook secret, and the JIT configs and registration tokens this process created) in the
message, its arguments, the exception text and the stack. Nothing is silenced: loggers keep
their levels, and a line keeps everything but the secret.
"""

from __future__ import annotations

import logging
import re
import sys

from autoscaler.secrets import REDACTED, live_secret_values

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Redactor(logging.Filter):
    """Replaces every live secret's value in a record (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._version = -1
        self._pattern: re.Pattern[str] | None = None
        self._formatter = logging.Formatter()

    def _current(self) -> re.Pattern[str] | None:
        version, values = live_secret_values()
        if version != self._version:
            # Longest first: a value that contains another is replaced whole.
            ordered = sorted(values, key=lambda v: (-len(v), v))
            self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
            self._version = version
        return self._pattern

    def filter(self, record: logging.LogRecord) -> bool:
        pattern = self._current()
        if pattern is None:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is logging's to report, with the record
            return True
        clean = pattern.sub(REDACTED, message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = pattern.sub(REDACTED, record.exc_text)
        if record.stack_info:
            record.stack_info = pattern.sub(REDACTED, record.stack_info)
        return True


def setup_logging(level: str) -> None:
    """Log to stderr at ``level``, through the redacting filter. httpx logs each request at
    INFO (hundreds per tick): it and httpcore say so only at ``debug``."""
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper(), logging.INFO),
        format=FORMAT,
        force=True,
    )
    redact(logging.getLogger())
    quiet = logging.DEBUG if level == "debug" else logging.WARNING
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(quiet)


def redact(logger: logging.Logger) -> None:
    """Put the redacting filter on each of ``logger``'s handlers (once)."""
    for handler in logger.handlers:
        if not any(isinstance(f, Redactor) for f in handler.filters):
            handler.addFilter(Redactor())
