"""sqlite3 errors -> :class:`autoscaler.errors.StateError`, by SQLite result code.

The store's edge: nothing above :mod:`autoscaler.state.sqlite` sees a sqlite3 exception
or a traceback for a bad state file. Each error names the file and says what to do, in one
line an operator can act on. Classified by ``sqlite_errorcode`` (the primary result code,
the low byte), never by message text:

| SQLite                  | code             | error              | what to do                  |
|-------------------------|------------------|--------------------|-----------------------------|
| SQLITE_BUSY, _LOCKED    | ``locked``       | StateLockedError   | another controller holds it |
| SQLITE_NOTADB           | ``not_a_database`` | StateUnusableError | move the file aside       |
| SQLITE_CORRUPT          | ``corrupt``      | StateUnusableError | move the file aside         |
| SQLITE_READONLY         | ``read_only``    | StateUnusableError | make it writable            |
| SQLITE_CANTOPEN         | ``cannot_open``  | StateUnusableError | create/fix its directory    |
| SQLITE_PERM, _AUTH      | ``permission``   | StateUnusableError | fix its permissions         |
| SQLITE_FULL             | ``disk_full``    | StateUnusableError | free space                  |
| SQLITE_IOERR            | ``io_error``     | StateUnusableError | check the volume            |
| anything else           | ``sqlite_error`` | StateUnusableError | see the debug log           |

An ``OSError`` making the file's directory is ``permission`` or ``cannot_open``. A file in
write-ahead-log mode that the controller may not write fails to open with an I/O or
cannot-open error (SQLite cannot map its shared-memory index): that is ``read_only``, read
from the file's mode. The
``code`` is the bounded label of ``ci_autoscaler_state_store_errors_total``.
"""

from __future__ import annotations

import os
import sqlite3

from autoscaler.errors import StateError, StateLockedError, StateUnusableError

_BY_RESULT_CODE = {
    5: "locked",  # SQLITE_BUSY: another connection holds the lock past our busy timeout
    6: "locked",  # SQLITE_LOCKED
    26: "not_a_database",  # SQLITE_NOTADB
    11: "corrupt",  # SQLITE_CORRUPT
    8: "read_only",  # SQLITE_READONLY (and its extended codes)
    14: "cannot_open",  # SQLITE_CANTOPEN
    3: "permission",  # SQLITE_PERM
    23: "permission",  # SQLITE_AUTH
    13: "disk_full",  # SQLITE_FULL
    10: "io_error",  # SQLITE_IOERR (and its extended codes)
}

_MOVE_ASIDE = (
    "Alerting is stopped (scaling goes on): move the file aside and the next tick starts a "
    "fresh one (its alert states and undelivered notifications are lost; alerts still "
    "firing notify again)"
)
MESSAGES = {
    "locked": (
        "state file {path} is locked by another process: another ci-autoscaler is running "
        "with the same state.path. Run one controller per state file: stop the other one, "
        "or give this one its own state.path"
    ),
    "not_a_database": "state file {path} is not a SQLite database (corrupt or truncated). "
    + _MOVE_ASIDE,
    "corrupt": "state file {path} is corrupt (SQLite: malformed database). " + _MOVE_ASIDE,
    "read_only": (
        "state file {path} is read-only: alert states and notifications cannot be recorded, "
        "so alerting is stopped (scaling goes on). Make the file and its directory writable "
        "by the controller's user"
    ),
    "cannot_open": (
        "cannot open state file {path}: its directory is missing or not writable. Create it, "
        "writable by the controller's user, or set state.path to a writable place"
    ),
    "permission": (
        "no permission to use state file {path}: make the file and its directory readable "
        "and writable by the controller's user"
    ),
    "disk_full": (
        "the disk holding state file {path} is full: alert states and notifications cannot "
        "be recorded, so alerting is stopped (scaling goes on). Free space on it"
    ),
    "io_error": "I/O error on state file {path}: check the disk or volume it lives on",
    "sqlite_error": (
        "state file {path}: unexpected SQLite error, alerting is stopped (scaling goes on); "
        "--log-level debug shows SQLite's message"
    ),
}


def classify(exc: BaseException) -> str:
    """The bounded code for an error raised while using the state file."""
    if isinstance(exc, sqlite3.Error):
        result = getattr(exc, "sqlite_errorcode", None)
        if isinstance(result, int):
            return _BY_RESULT_CODE.get(result & 0xFF, "sqlite_error")
        return "sqlite_error"
    if isinstance(exc, PermissionError):
        return "permission"
    return "cannot_open"


def _read_only(path: str) -> bool:
    """The file exists and this process may not write it."""
    return os.path.exists(path) and not os.access(path, os.W_OK)


def translate(exc: BaseException, path: str, operation: str) -> StateError:
    """Our error for ``exc``, raised by ``operation`` on the state file at ``path``."""
    code = classify(exc)
    if code in ("io_error", "cannot_open") and _read_only(path):
        code = "read_only"
    cls = StateLockedError if code == "locked" else StateUnusableError
    return cls(MESSAGES[code].format(path=path), path=path, code=code, operation=operation)
