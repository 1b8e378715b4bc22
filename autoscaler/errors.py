"""The error tree. Retry semantics live in the type, never in the message.

    AutoscalerError
    ├── ConfigError          the configuration is invalid; carries every problem at once
    ├── TransientError       retry with backoff; ``retry_after`` (seconds) when the peer said
    │   ├── RateLimitedError the peer rate-limited us (GitHub 403/429, AWS Throttling)
    │   ├── StateLockedError (also a StateError) another process holds the state file
    │   └── StateUnavailableError (also a StateError) the state table is unreachable or
    │                        throttled right now
    ├── DeferredError        the resource is busy (ScalingActivityInProgress): not retried
    │   │                    now, the next tick tries again
    │   └── NotLeaderError   (also a StateError) this controller does not hold the leader
    │                        lease (with its safety margin): the action is the leader's
    ├── CapacityError        no capacity in this pool: fail over to the next pool
    ├── PermanentError       retrying cannot help: alert at once
    │   ├── AuthenticationError  credentials rejected (GitHub 401, AWS AccessDenied)
    │   ├── NotFoundError        the resource does not exist (GitHub 404)
    │   ├── RejectedError        the request was understood and refused (GitHub 422)
    │   └── StateUnusableError   (also a StateError) the state file is corrupt, not a
    │                            database, read-only, unreachable or its disk is full
    └── StateError           the state store cannot be used; ``path`` names its file (or
                             table) and the message says what to do (StateLockedError,
                             StateUnavailableError, StateUnusableError, NotLeaderError)

Adapters translate vendor errors into these at the edge; nothing above an adapter sees an
httpx, botocore or sqlite3 exception. Messages never carry secrets.
"""

from __future__ import annotations


class AutoscalerError(Exception):
    """Base of every error this package raises on purpose."""

    #: A short, bounded label for metrics (never the message).
    kind: str = "error"

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        #: The vendor's error code or HTTP status, for metrics and logs ("" when none).
        self.code = code


class ConfigError(AutoscalerError):
    """The configuration is invalid. ``problems`` lists each one with its path."""

    kind = "config"

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))


class TransientError(AutoscalerError):
    """Worth retrying after a backoff; ``retry_after`` is the peer's own hint in seconds."""

    kind = "transient"

    def __init__(self, message: str, *, code: str = "", retry_after: float | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class RateLimitedError(TransientError):
    """The peer rate-limited us; wait ``retry_after`` seconds before the next call."""

    kind = "rate_limited"


class DeferredError(AutoscalerError):
    """The target is busy with something else; leave it for the next tick, do not retry now."""

    kind = "busy"


class CapacityError(AutoscalerError):
    """The pool has no capacity (e.g. InsufficientInstanceCapacity); try the next pool."""

    kind = "capacity"


class PermanentError(AutoscalerError):
    """Retrying cannot help; surface it and alert."""

    kind = "permanent"


class AuthenticationError(PermanentError):
    """Credentials were rejected or lack a permission."""

    kind = "auth"


class NotFoundError(PermanentError):
    """The named resource does not exist (or is hidden from these credentials)."""

    kind = "not_found"


class RejectedError(PermanentError):
    """The peer understood the request and refused it (GitHub 422: runner is busy)."""

    kind = "rejected"


class StateError(AutoscalerError):
    """The state store cannot be used. ``path`` names its file, ``operation`` what was being
    done (bounded: ``open``, ``save``, ...); the message says what the operator should do."""

    kind = "state"

    def __init__(self, message: str, *, path: str, code: str = "", operation: str = "") -> None:
        super().__init__(message, code=code)
        self.path = path
        self.operation = operation


class StateLockedError(StateError, TransientError):
    """Another process holds the state file's lock: another controller runs on the same file.
    Waiting helps once it stops."""

    kind = "state_locked"


class StateUnusableError(StateError, PermanentError):
    """The state file is corrupt, not a database, read-only or unreachable, or the state
    table is missing or forbidden: a person must act (the message says how)."""

    kind = "state_unusable"


class StateUnavailableError(StateError, TransientError):
    """The state table cannot be reached or throttles us right now: waiting may help."""

    kind = "state_unavailable"


class NotLeaderError(StateError, DeferredError):
    """This controller does not hold the leader lease with its safety margin left, or a
    write was fenced off because another controller took the lease (a newer epoch). The
    action is the leader's: nothing was done, and nothing is retried here."""

    kind = "not_leader"
