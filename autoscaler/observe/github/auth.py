"""GitHub credentials: a token, or a GitHub App's installation token (JWT RS256 exchange).

An installation token lives an hour; it is cached and refreshed ``REFRESH_BEFORE`` seconds
before it expires (or at once after a 401). Nothing here ever logs or raises a secret, and
the token and the App's JWT are held as :class:`Secret`, so the log filter knows them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

import jwt

from autoscaler.config import GitHubAppConfig
from autoscaler.errors import AuthenticationError, TransientError
from autoscaler.secrets import Secret

#: Refresh an installation token this many seconds before it expires.
REFRESH_BEFORE = 300.0
#: Lifetime of the app JWT (GitHub allows at most 10 minutes); iat is backdated 60 s.
JWT_LIFETIME = 540

#: Posts ``/app/installations/{id}/access_tokens`` with the given Authorization header and
#: returns the decoded JSON body.
Exchange = Callable[[int, str], Mapping[str, Any]]


class Auth(Protocol):
    def authorization(self) -> str:
        """The Authorization header value for the next request."""
        ...

    def invalidate(self, rejected: str) -> bool:
        """``rejected`` (an Authorization value) got a 401: forget it; True when a retry
        may help."""
        ...


class TokenAuth:
    def __init__(self, token: Secret) -> None:
        self._token = token

    def authorization(self) -> str:
        return f"Bearer {self._token.reveal()}"

    def invalidate(self, rejected: str) -> bool:
        return False

    def __repr__(self) -> str:
        return "TokenAuth(***)"


class AppAuth:
    """Signs a JWT with the app's key and exchanges it for an installation token."""

    def __init__(
        self, app: GitHubAppConfig, exchange: Exchange, wall_clock: Callable[[], float]
    ) -> None:
        self._app = app
        self._exchange = exchange
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._token: Secret | None = None
        self._expires_at = 0.0
        #: How many installation tokens were fetched (for tests and logs).
        self.fetches = 0

    def __repr__(self) -> str:
        return f"AppAuth(app_id={self._app.app_id}, installation_id={self._app.installation_id})"

    def app_jwt(self) -> str:
        now = int(self._wall_clock())
        claims = {"iat": now - 60, "exp": now + JWT_LIFETIME, "iss": str(self._app.app_id)}
        try:
            return jwt.encode(claims, self._app.private_key.reveal(), algorithm="RS256")
        except (ValueError, TypeError, jwt.PyJWTError) as exc:
            raise AuthenticationError(
                f"GitHub App {self._app.app_id}: the private key cannot sign a JWT "
                f"({type(exc).__name__})"
            ) from None

    def authorization(self) -> str:
        with self._lock:
            if self._token is None or self._wall_clock() >= self._expires_at - REFRESH_BEFORE:
                self._refresh()
            assert self._token is not None
            return f"Bearer {self._token.reveal()}"

    def invalidate(self, rejected: str) -> bool:
        with self._lock:
            # Concurrent requests may all see the same 401: only the first one forgets it.
            if self._token is not None and rejected == f"Bearer {self._token.reveal()}":
                self._token = None
            return True

    def _refresh(self) -> None:
        app_jwt = Secret(self.app_jwt())  # known to the log filter while it is used
        body = self._exchange(self._app.installation_id, f"Bearer {app_jwt.reveal()}")
        token, expires = body.get("token"), body.get("expires_at")
        if not isinstance(token, str) or not token or not isinstance(expires, str):
            raise TransientError(
                f"GitHub App installation {self._app.installation_id}: "
                "the access token response lacks token/expires_at"
            )
        try:
            expires_at = datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise TransientError(
                f"GitHub App installation {self._app.installation_id}: bad expires_at"
            ) from None
        self._token, self._expires_at = Secret(token), expires_at
        self.fetches += 1
