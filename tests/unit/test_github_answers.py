"""What a GitHub answer means and how much of its body is read, apart from any transport.

The adapter tests drive these through HTTP; these pin each rule on its own: the error
type of an answer no retry changes, the header readings the retry policy needs, and the
page limit while a body is read or inflated.
"""

from __future__ import annotations

import gzip

import pytest

from autoscaler.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    PermanentError,
    RejectedError,
)
from autoscaler.observe.github.answers import (
    Answer,
    error_message,
    peer_time,
    refusal,
    retry_after_seconds,
)
from autoscaler.observe.github.wire import MAX_PAGE_BYTES, read_body, response_headers


def answer(status: int, content: bytes = b"", **headers: str) -> Answer:
    return Answer(status, headers, content, "Reason")


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (403, AuthenticationError),
        (404, NotFoundError),
        (422, RejectedError),
        (409, ConflictError),
        (418, PermanentError),
    ],
    ids=["403-forbidden", "404-not-found", "422-rejected", "409-conflict", "other-4xx"],
)
def test_an_answer_no_retry_changes_is_its_error_type(
    status: int, kind: type[PermanentError]
) -> None:
    error = refusal(answer(status), "GET /repos/o/r", "msg")
    assert type(error) is kind
    assert error.code == str(status)
    assert "GET /repos/o/r" in str(error)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"message": "Validation Failed"}', "Validation Failed"),
        (b"<html>502</html>", "Reason"),
        (b"[" * 100_000 + b"]" * 100_000, "Reason"),
        (b'["a list"]', "Reason"),
    ],
    ids=["json-message", "html-page", "deep-json", "not-an-object"],
)
def test_the_error_message_never_fails(content: bytes, expected: str) -> None:
    assert error_message(answer(500, content)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("30", 30.0), ("-5", 0.0), ("soon", None), (None, None)],
    ids=["seconds", "negative-is-now", "not-a-number", "absent"],
)
def test_retry_after(value: str | None, expected: float | None) -> None:
    headers = {} if value is None else {"retry-after": value}
    assert retry_after_seconds(Answer(503, headers, b"", "")) == expected


def test_a_date_without_a_zone_or_malformed_is_no_clock() -> None:
    assert peer_time("Tue, 01 Dec 2026 13:00:00 GMT") == 1796130000.0
    assert peer_time("Tue, 01 Dec 2026 13:00:00 -0000") is None  # "-0000": zone unknown
    assert peer_time("not a date") is None
    assert peer_time("") is None


def test_repeated_response_headers_are_joined_and_names_lowered() -> None:
    raw = [(b"Link", b"<a>; rel=next"), (b"link", b"<b>; rel=last"), (b"ETag", b'"x"')]
    assert response_headers(raw) == {"link": "<a>; rel=next, <b>; rel=last", "etag": '"x"'}


def test_a_body_is_read_whole_up_to_the_limit_and_refused_past_it() -> None:
    assert read_body([b"ab", b"cd"], None) == b"abcd"
    assert read_body([b"x" * MAX_PAGE_BYTES], None) == b"x" * MAX_PAGE_BYTES
    assert read_body([b"x" * MAX_PAGE_BYTES, b"y"], None) is None


def test_a_small_gzip_bomb_is_refused_while_it_is_inflated() -> None:
    """A few KB that inflate past the page limit never reach the parser."""
    bomb = gzip.compress(b"0" * (MAX_PAGE_BYTES + 1))
    assert len(bomb) < MAX_PAGE_BYTES // 100
    assert read_body([bomb], "gzip") is None
    assert read_body([gzip.compress(b'{"ok": 1}')], "gzip") == b'{"ok": 1}'
