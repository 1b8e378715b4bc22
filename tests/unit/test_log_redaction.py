"""The root handler's filter replaces every live secret's value in every record, whoever
logged it and in whatever form a library prints it; nothing else changes, and a secret no
longer held is no longer looked for."""

from __future__ import annotations

import base64
import gc
import io
import json
import logging
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from autoscaler.app.logs import Redactor, redact
from autoscaler.secrets import REDACTED, Secret, SecretUrl, live_secret_values

JIT = base64.b64encode(b'{"runner_id": 42, "nonce": "b3f1"}').decode()


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose records end in a handler carrying the filter, as the root's do."""
    out = io.StringIO()
    root = logging.getLogger("redaction-test")
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    root.propagate = False
    redact(root)
    try:
        yield root, out
    finally:
        root.removeHandler(handler)


def test_a_secret_in_a_library_s_debug_line_is_replaced(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = logged
    config = Secret(JIT)
    # botocore at DEBUG: the request body, as bytes
    body = json.dumps({"Name": "/jit/p/i-1", "Value": config.reveal()}).encode()
    logger.getChild("botocore.endpoint").debug("Making request with params: %r", {"body": body})
    text = out.getvalue()
    assert JIT not in text and REDACTED in text
    assert "/jit/p/i-1" in text  # the rest of the line is kept


@pytest.mark.parametrize(
    "form",
    [
        pytest.param(lambda v: v, id="as-is"),
        pytest.param(json.dumps, id="json-escaped"),
        pytest.param(repr, id="python-repr"),
        pytest.param(lambda v: quote(v, safe=""), id="percent-encoded"),
    ],
)
def test_every_form_of_a_value_is_replaced(
    logged: tuple[logging.Logger, io.StringIO], form: object
) -> None:
    logger, out = logged
    value = 'tok"en/with+odd=chars\\'
    held = Secret(value)
    logger.info("sent %s", form(value))  # type: ignore[operator]
    assert REDACTED in out.getvalue()
    assert held.reveal() not in out.getvalue()


def test_a_receiver_url_s_key_and_basic_auth_are_replaced_wherever_they_appear(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = logged
    slack = SecretUrl("https://hooks.slack.com/services/T0ABC/B0DEF/xoxbKEYKEYKEY")
    basic = SecretUrl("https://bot:s3cr%2Fet-pw@alerts.example.com/hook")
    header = base64.b64encode(b"bot:s3cr/et-pw").decode()
    logger.debug('hooks.slack.com:443 "POST /services/T0ABC/B0DEF/xoxbKEYKEYKEY HTTP/1.1" 200')
    logger.debug("Authorization: Basic %s; password %s", header, "s3cr/et-pw")
    logger.debug("url %s", basic.reveal())
    text = out.getvalue()
    for leaked in ("xoxbKEYKEYKEY", "s3cr/et-pw", "s3cr%2Fet-pw", header):
        assert leaked not in text
    assert "hooks.slack.com:443" in text and "alerts.example.com" not in text.split("url ")[1]
    assert slack.reveal()


def test_exception_text_and_stacks_are_redacted(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = logged
    token = Secret("ghp_" + "a1B2" * 9)
    try:
        raise RuntimeError(f"bad answer for {token.reveal()}")
    except RuntimeError:
        logger.exception("call failed", stack_info=True)
    assert token.reveal() not in out.getvalue()
    assert "RuntimeError: bad answer for " + REDACTED in out.getvalue()


def test_a_value_is_forgotten_once_no_secret_holds_it(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    """A JIT config or a registration token is held until it is handed over: the filter's
    list does not grow with every instance the controller ever served."""
    logger, out = logged
    held = Secret("REGTOKEN-" + "7" * 20)
    value = held.reveal()
    assert value in live_secret_values()[1]
    del held
    gc.collect()
    assert value not in live_secret_values()[1]
    logger.info("after: %s", value)
    assert value in out.getvalue()


def test_short_values_are_not_redacted(logged: tuple[logging.Logger, io.StringIO]) -> None:
    """Shorter than six characters, a value would match ordinary words (a test's token
    "t" would eat every t of every line)."""
    logger, out = logged
    held = Secret("t")
    logger.info("the tick took %d ms", 3)
    assert out.getvalue().strip() == "redaction-test the tick took 3 ms"
    assert held.reveal() == "t"


def test_the_filter_sits_on_the_handlers_and_leaves_levels_alone() -> None:
    """Redaction is by value in the handler's filter, not by quieting loggers."""
    root = logging.getLogger("redaction-levels")
    handler = logging.StreamHandler(io.StringIO())
    root.addHandler(handler)
    before = logging.getLogger("botocore").level
    redact(root)
    redact(root)  # once per handler
    assert sum(isinstance(f, Redactor) for f in handler.filters) == 1
    assert logging.getLogger("botocore").level == before
    root.removeHandler(handler)
