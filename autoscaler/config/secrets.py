"""Values that must never show themselves, and the tests that spot credentials in text.

- :class:`Secret` holds a token or key; its repr and str are ``***``.
- :class:`SecretUrl` holds a receiver URL (a Slack webhook's path *is* its credential, a
  generic webhook may carry ``user:password@``): its repr and str keep only the scheme,
  host and port (:func:`redact_url`).
- :func:`looks_like_credential` and :func:`scrub` spot what must not be echoed: GitHub
  tokens (``ghp_``, ``gho_``, ``ghs_``, ``ghu_``, ``ghr_``, ``github_pat_``), AWS access
  key ids (``AKIA``/``ASIA``), Slack tokens (``xox?-``), PEM blocks, URLs with userinfo
  and long high-entropy strings. Config messages show a value through :func:`shown`, and
  every message passes :func:`scrub` on its way out, so a secret pasted under the wrong
  key is never printed back (the message still says what is wrong with it).

Pure: no I/O, no vendor imports.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

#: Placeholder for a credential-looking token inside a message.
REDACTED = "<redacted>"

_PREFIXED = re.compile(
    r"(?:\b(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{8,}"  # GitHub tokens
    r"|\b(?:AKIA|ASIA)[A-Z0-9]{12,}"  # AWS access key ids
    r"|\bxox[abposr]-[A-Za-z0-9-]{8,})"  # Slack tokens
)
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----(?:.*?-----END [A-Z0-9 ]+-----|.*)", re.DOTALL)
_USERINFO_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@'\"]+@[^\s'\"]*")
_ANY_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
_TOKEN = re.compile(r"[A-Za-z0-9+/=]{20,}")
#: Bits per character above which a long mixed token is taken for a key (random base64
#: is ~4.2-4.6, random hex ~3.7-3.9; words and names of that length mix few digits).
_ENTROPY_BITS = 3.5


def redact_url(url: str) -> str:
    """``scheme://host[:port]``, plus ``/...`` when userinfo, a path or a query was dropped.

    What is left is enough to tell receivers apart in a log and reveals no credential.
    Anything that does not parse as ``scheme://host`` becomes ``<redacted URL>``.
    """
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return "<redacted URL>"
    if not parts.scheme or not host:
        return "<redacted URL>"
    if ":" in host:
        host = f"[{host}]"
    out = f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")
    dropped = "@" in parts.netloc or parts.path not in ("", "/") or parts.query or parts.fragment
    return out + ("/..." if dropped else "")


def _high_entropy(token: str) -> bool:
    letters = sum(c.isalpha() for c in token)
    digits = sum(c.isdigit() for c in token)
    if not letters or not digits:
        return False
    mixed_case = any(c.islower() for c in token) and any(c.isupper() for c in token)
    if not mixed_case and digits / len(token) < 0.15:
        return False
    counts = Counter(token)
    bits = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return bits >= _ENTROPY_BITS


def looks_like_credential(text: str) -> bool:
    """True when ``text`` holds something a person would not want printed back."""
    if _PREFIXED.search(text) or _PEM.search(text) or _USERINFO_URL.search(text):
        return True
    return any(_high_entropy(m.group(0)) for m in _TOKEN.finditer(text))


def scrub(text: str) -> str:
    """``text`` with every credential-looking part replaced; every URL keeps only its
    scheme and host (a receiver URL's path may be its key)."""
    text = _PEM.sub("<redacted PEM block>", text)
    text = _ANY_URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _PREFIXED.sub(REDACTED, text)
    return _TOKEN.sub(lambda m: REDACTED if _high_entropy(m.group(0)) else m.group(0), text)


def shown(value: Any) -> str:
    """How a config message quotes a value: its repr, a URL as ``scheme://host``, and a
    credential-looking value not at all."""
    if isinstance(value, str):
        if _ANY_URL.fullmatch(value.strip()):
            return repr(redact_url(value))
        if looks_like_credential(value):
            return "a value that looks like a credential (not shown)"
    return repr(value)


class Secret:
    """A string that never shows itself in a repr, str, log line or exception."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class SecretUrl(Secret):
    """A receiver URL: its repr and str show only :func:`redact_url`'s ``scheme://host``."""

    __slots__ = ()

    @property
    def redacted(self) -> str:
        return redact_url(self._value)

    def __repr__(self) -> str:
        return f"SecretUrl({self.redacted!r})"

    def __str__(self) -> str:
        return self.redacted
