"""What counts as a credential, and how a receiver URL shows itself."""

from __future__ import annotations

import random
import string

import pytest

from autoscaler.config import ReceiverConfig
from autoscaler.secrets import SecretUrl, looks_like_credential, redact_url, scrub, shown

SLACK = "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/xoXoXoXoXoXoXoXoXoXoXoXo"


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        pytest.param(SLACK, "https://hooks.slack.com/...", id="slack-secret-path"),
        pytest.param(
            "https://user:pass@hooks.example.com/x", "https://hooks.example.com/...", id="userinfo"
        ),
        pytest.param(
            "http://127.0.0.1:8080/hook?token=abc", "http://127.0.0.1:8080/...", id="port-query"
        ),
        pytest.param("https://alerts.example.com", "https://alerts.example.com", id="bare-host"),
        pytest.param("https://alerts.example.com/", "https://alerts.example.com", id="root-path"),
        pytest.param(
            "HTTPS://Alerts.Example.com/#frag", "https://alerts.example.com/...", id="fragment"
        ),
        pytest.param("http://[::1]:9093/api/v2/alerts", "http://[::1]:9093/...", id="ipv6"),
        pytest.param("not-a-url", "<redacted URL>", id="not-a-url"),
        pytest.param("https://h:notaport/x", "<redacted URL>", id="bad-port"),
    ],
)
def test_redact_url_keeps_scheme_host_and_port_only(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("ghp_16C7e42F292c6912E7710c838347Ae178B4a", id="github-classic"),
        pytest.param("gho_16C7e42F292c6912E7710c838347Ae178B4a", id="github-oauth"),
        pytest.param("ghs_16C7e42F292c6912E7710c838347Ae178B4a", id="github-app-installation"),
        pytest.param("ghu_16C7e42F292c6912E7710c838347Ae178B4a", id="github-user-to-server"),
        pytest.param(
            "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789ABCDEFG",
            id="github-fine-grained",
        ),
        pytest.param("AKIAIOSFODNN7EXAMPLE", id="aws-access-key-id"),
        pytest.param("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", id="aws-secret-key"),
        pytest.param(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", id="pem"
        ),
        pytest.param("xoxb-123456789012-abcdefABCDEF", id="slack-token"),
        pytest.param("3f9c0d6a1b2e4f58a7c6d5e4f3a2b1c0d9e8f7a6", id="hex-40"),
        pytest.param("prefix ghp_16C7e42F292c6912E7710c838347Ae178B4a suffix", id="embedded"),
    ],
)
def test_credentials_are_recognised(text: str) -> None:
    assert looks_like_credential(text)
    assert shown(text) == "a value that looks like a credential (not shown)"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("linux.g5.4xlarge.nvidia.gpu", id="runner-type"),
        pytest.param("capacity_backoff_initial", id="key-name"),
        pytest.param("ci-gpu-ondemand-i-0abc123def4567890", id="runner-name"),
        pytest.param("/var/lib/ci-autoscaler/state.db", id="path"),
        pytest.param("1h30m", id="duration"),
        pytest.param("pytorch-dev-infra", id="team"),
        pytest.param("3f9c0d6a1b2e4f58", id="fingerprint-16-hex"),
        pytest.param("thisisaverylongrunnername", id="long-word-no-digits"),
    ],
)
def test_ordinary_values_are_not_credentials(text: str) -> None:
    assert not looks_like_credential(text)
    assert shown(text) == repr(text)
    assert scrub(text) == text


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("WindowsServer2022Datacenter", id="camel-case-with-year"),
        pytest.param("linuxGPU4xlargeNvidiaA100x8", id="gpu-type"),
        pytest.param("MyOrgCiRunnersProd2024Pool", id="short-words"),
        pytest.param("Ubuntu2204Arm64Runner16core", id="arch-and-size"),
        pytest.param("subnet0123456789abcdef0", id="subnet-id"),
    ],
)
def test_long_names_stay_readable_in_messages_but_are_not_echoed_as_values(name: str) -> None:
    """The trade-off, on purpose: a long run of letters and digits given as a *wrong
    value* is not echoed (it may be a key: costly to show, cheap to hide); the same
    run as the *name* of a runner type or pool in a message stays readable."""
    message = f"runner_types.{name}.labels: same labels as runner type {name!r}"
    assert scrub(message) == message
    assert shown(name) == "a value that looks like a credential (not shown)"


def test_random_keys_are_spotted_in_messages() -> None:
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits
    keys = ["".join(rng.choice(alphabet) for _ in range(40)) for _ in range(200)]
    keys = [k for k in keys if any(c.isdigit() for c in k)]
    missed = [k for k in keys if not looks_like_credential(k)]
    assert missed == []
    scrubbed = sum(scrub(f"got {k} here") == "got <redacted> here" for k in keys)
    assert scrubbed / len(keys) > 0.75  # the net under shown(): names win its ties


def test_a_url_is_shown_as_scheme_and_host_only() -> None:
    assert looks_like_credential("https://bot:hunter2@hooks.example.com/x")
    assert shown("https://bot:hunter2@hooks.example.com/x") == "'https://hooks.example.com/...'"
    assert shown(SLACK) == "'https://hooks.slack.com/...'"
    assert shown("ftp://x") == "'ftp://x'"


def test_scrub_keeps_the_sentence_and_drops_the_secret() -> None:
    text = f"got 'ghp_16C7e42F292c6912E7710c838347Ae178B4a' and {SLACK} at line 3"
    assert scrub(text) == "got '<redacted>' and https://hooks.slack.com/... at line 3"


def test_a_receiver_url_is_a_secret_in_every_repr() -> None:
    """Story: ``repr(config)`` printed a Slack webhook URL in full, and its path is the key."""
    rc = ReceiverConfig(name="slack", type="slack", url=SecretUrl(SLACK))
    assert "xoXo" not in repr(rc) and "T0AAAAAAA" not in repr(rc)
    assert "https://hooks.slack.com/..." in repr(rc)
    assert str(rc.url) == "https://hooks.slack.com/..."
    assert f"{rc.url}" == "https://hooks.slack.com/..."
    assert rc.url is not None and rc.url.reveal() == SLACK
    # A plain string built in code (a test, the demo) is wrapped all the same.
    plain = ReceiverConfig(name="hook", type="webhook", url=SLACK)
    assert isinstance(plain.url, SecretUrl) and "xoXo" not in repr(plain)
