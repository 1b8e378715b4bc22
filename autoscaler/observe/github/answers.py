"""What a GitHub answer says, read from its status, headers and body: no I/O here.

GitHubHttp's retry loop decides *whether* to try again (401 refresh, rate limits, 5xx);
what an answer means once no retry is left (which error type, which message) and the
small header readings the loop needs (``Retry-After``, ``Date``, GitHub's ``message``)
are pure functions of the answer, kept here so they are read and tested apart from the
transport. Messages name the method and URL path, never a credential.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import lru_cache
from urllib.parse import urlsplit

from autoscaler.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    PermanentError,
    RejectedError,
)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    """Lower-case names; a repeated header's values joined with ``", "`` (as httpx does)."""
    content: bytes
    reason: str


def refusal(answer: Answer, where: str, message: str) -> PermanentError:
    """The error of an answer no retry can change (403, 404, 422, 409, any other 4xx).

    ``where`` is ``"<METHOD> <path>"``; ``message`` is :func:`error_message` of the answer.
    """
    status = answer.status
    code = str(status)
    if status == 403:
        return AuthenticationError(
            f"GitHub {where}: 403 Forbidden, the credentials lack a permission ({message})",
            code=code,
        )
    if status == 404:
        return NotFoundError(
            f"GitHub {where}: 404 Not Found (wrong github.owner/repos, or the "
            "credentials cannot see it)",
            code=code,
        )
    if status == 422:
        return RejectedError(f"GitHub {where}: 422 {message}", code=code)
    if status == 409:
        return ConflictError(f"GitHub {where}: 409 {message}", code=code)
    return PermanentError(f"GitHub {where}: {status} {message}", code=code)


@lru_cache(maxsize=8)
def peer_time(text: str) -> float | None:
    """A ``Date`` header as unix time; None when absent, malformed or without a zone.
    (It changes once a second, and every answer carries one: remembered.)"""
    try:
        peer = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return None if peer.tzinfo is None else peer.timestamp()


def path_of(url: str) -> str:
    """The URL's path: what an error message or log line may name (no query, no host)."""
    return urlsplit(url).path


def number(text: str | None) -> float | None:
    """A numeric header's value; None when absent or not a number."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def retry_after_seconds(answer: Answer) -> float | None:
    value = number(answer.headers.get("retry-after"))
    return None if value is None else max(0.0, value)


def error_message(answer: Answer) -> str:
    """GitHub's ``message`` of an error body; never fails (HTML pages, deep JSON)."""
    try:
        body = json.loads(answer.content)
        message = body.get("message", "") if isinstance(body, dict) else ""
    except (ValueError, RecursionError):
        message = ""
    return str(message)[:200] or answer.reason
