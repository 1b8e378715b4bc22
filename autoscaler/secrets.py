"""Values that must never show themselves, and the tests that spot credentials in text.

- :class:`Secret` holds a token or key; its repr and str are ``***``. Every Secret alive
  in the process is known by value (:func:`live_secret_values`): the logging filter on
  the root handler (:mod:`autoscaler.app.logs`) replaces those values in every log line,
  whichever library wrote it, at every level. A value is known while a Secret holds it
  (a JIT config or a registration token is forgotten once handed over and dropped).
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

import base64
import itertools
import json
import math
import re
import threading
import weakref
from collections import Counter
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

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
#: A run of 20+ letters and digits whose Shannon entropy is at least this (bits per
#: character) may be key material: random hex has ~3.5-3.9, random base62/64 ~4-4.5.
_ENTROPY_BITS_HEX = 3.0
#: In a whole message (where names must stay readable) a non-hex token must reach this.
_ENTROPY_BITS = 3.5
_SWITCH_RATIO = 0.25
#: A word of a name: four or more lower-case letters (capitalised or not) with a vowel.
_WORD = re.compile(r"[A-Z]?[a-z]{4,}")
_HEX = frozenset("0123456789abcdefABCDEF")


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


def _char_class(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2 if c.isdigit() else 3


def _name_like(token: str) -> bool:
    """Two words, or one long one (``xlarge``, ``Runners``, ``Datacenter``)."""
    words = [
        w
        for w in _WORD.findall(token)
        if any(v in w.lower() for v in "aeiou") and not set(w) <= _HEX
    ]
    return len(words) >= 2 or any(len(w) >= 6 for w in words)


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())


def _random_looking(token: str) -> bool:
    """Letters and digits, not repetitive: could be key material (or a long name)."""
    letters = any(c.isalpha() for c in token)
    digits = any(c.isdigit() for c in token)
    return letters and digits and _entropy(token) >= _ENTROPY_BITS_HEX


def _key_material(token: str) -> bool:
    """A token that reads like random key material and not like a name.

    Random text switches between lower case, upper case and digits at most adjacent
    characters (base62: ~60%, hex: ~45%) and has no words; a name with a year in it
    (``WindowsServer2022Datacenter``) switches a handful of times and has words. High
    switching, high entropy and no words make a key. Used on whole messages, where the
    names of runner types and pools must stay readable.
    """
    if not _random_looking(token):
        return False
    switches = sum(_char_class(a) != _char_class(b) for a, b in itertools.pairwise(token))
    if switches / (len(token) - 1) < _SWITCH_RATIO or _name_like(token):
        return False
    return _entropy(token) >= (_ENTROPY_BITS_HEX if set(token) <= _HEX else _ENTROPY_BITS)


def looks_like_credential(text: str) -> bool:
    """True when ``text`` holds something a person would not want printed back: a known
    token prefix, a PEM block, a URL with userinfo, or any long random-looking run of
    letters and digits. Strict on purpose: a wrong value not echoed costs little, a key
    echoed costs a rotation."""
    if _PREFIXED.search(text) or _PEM.search(text) or _USERINFO_URL.search(text):
        return True
    return any(_random_looking(m.group(0)) for m in _TOKEN.finditer(text))


def scrub(text: str) -> str:
    """``text`` with every credential-looking part replaced (names kept readable); every
    URL keeps only its scheme and host (a receiver URL's path may be its key)."""
    text = _PEM.sub("<redacted PEM block>", text)
    text = _ANY_URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _PREFIXED.sub(REDACTED, text)
    return _TOKEN.sub(lambda m: REDACTED if _key_material(m.group(0)) else m.group(0), text)


def shown(value: Any) -> str:
    """How a config message quotes a value: its repr, a URL as ``scheme://host``, and a
    credential-looking value not at all."""
    if isinstance(value, str):
        if _ANY_URL.fullmatch(value.strip()):
            return repr(redact_url(value))
        if looks_like_credential(value):
            return "a value that looks like a credential (not shown)"
    return repr(value)


#: Values shorter than this are not redacted from logs: they would match ordinary words,
#: and no credential worth the name is that short.
MIN_REDACTED = 6


class _Live:
    """The values of the Secrets alive in this process, each in the forms a library may
    print it in, for the log filter. Thread-safe; a Secret is forgotten when collected."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forms: dict[int, tuple[str, ...]] = {}
        self._refs: dict[int, weakref.ref[Secret]] = {}
        #: Bumped on every change: the filter rebuilds its pattern when it moved.
        self.version = 0

    def add(self, secret: Secret, forms: tuple[str, ...]) -> None:
        if not forms:
            return
        key = id(secret)
        with self._lock:
            self._refs[key] = weakref.ref(secret, lambda _: self._drop(key))
            self._forms[key] = forms
            self.version += 1

    def _drop(self, key: int) -> None:
        with self._lock:
            self._refs.pop(key, None)
            if self._forms.pop(key, None) is not None:
                self.version += 1

    def values(self) -> tuple[int, frozenset[str]]:
        with self._lock:
            return self.version, frozenset(f for forms in self._forms.values() for f in forms)


_LIVE = _Live()


def live_secret_values() -> tuple[int, frozenset[str]]:
    """(a version that changes whenever the set does, every form of every live secret)."""
    return _LIVE.values()


def _forms(value: str) -> set[str]:
    """``value`` as it may appear in a log line: itself, escaped in JSON, in a Python repr,
    and percent-encoded."""
    out = {
        value,
        json.dumps(value)[1:-1],
        repr(value)[1:-1],
        quote(value, safe=""),
        quote_plus(value),
    }
    return {f for f in out if len(f) >= MIN_REDACTED}


def _url_forms(value: str) -> set[str]:
    """A receiver URL's own forms, and its parts that carry a credential on their own:
    the path and query (a Slack webhook's path is its key), the userinfo and password,
    and the ``Authorization: Basic`` value made from them."""
    out = _forms(value)
    try:
        parts = urlsplit(value.strip())
        password = parts.password
        username = parts.username
    except ValueError:
        return out
    rest = parts.path + (f"?{parts.query}" if parts.query else "")
    if rest not in ("", "/"):
        out |= _forms(rest)
    if password:
        user, pw = unquote(username or ""), unquote(password)
        basic = base64.b64encode(f"{user}:{pw}".encode()).decode()
        out |= _forms(pw) | _forms(f"{user}:{pw}") | _forms(basic)
        out |= _forms(parts.netloc.rpartition("@")[0])
    return out


class Secret:
    """A string that never shows itself in a repr, str, log line or exception."""

    __slots__ = ("__weakref__", "_value")

    def __init__(self, value: str) -> None:
        self._value = value
        _LIVE.add(self, tuple(sorted(self._log_forms())))

    def _log_forms(self) -> set[str]:
        return _forms(self._value) if len(self._value) >= MIN_REDACTED else set()

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

    def _log_forms(self) -> set[str]:
        return _url_forms(self._value)

    @property
    def redacted(self) -> str:
        return redact_url(self._value)

    def __repr__(self) -> str:
        return f"SecretUrl({self.redacted!r})"

    def __str__(self) -> str:
        return self.redacted
