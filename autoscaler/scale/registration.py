"""Handing one new instance its runner credential, in an order that survives a stop.

For an ephemeral type (a JIT config), per instance:

1. the *intent* (a :class:`HandoverRecord` without a runner id) is saved to the state
   store before GitHub is asked: a process that stops after GitHub answered finds it, and
   recovers instead of asking twice;
2. GitHub generates the runner (``generate-jitconfig``). Its 409 (the name is taken: ours
   from before a stop) is resolved by name: a runner online already is adopted; an
   offline one is deleted and the config asked for again, once;
3. the config is handed over: the SSM SecureString only that instance may read. If that
   fails (after the retry policy's attempts), the runner is deleted at GitHub again;
4. the record (runner id, parameter stored) is saved.

For a persistent type (a registration token) there is nothing to recover: asking twice
creates nothing at GitHub. The token is asked for, stored in the instance's parameter and
recorded with its expiry; a token that cannot be stored is simply not used (it expires).

A permanent answer (422: labels or runner group refused; 403: the credentials lack
"Self-hosted runners: write") is paged every tick through the calls' problem list; a
transient one (rate limit, 5xx) is retried next tick. Every outcome is counted
(``ci_autoscaler_jit_configs_total{runner_type,result}``,
``ci_autoscaler_registration_tokens_total{runner_type,result}``) and logged.

Also here: the ports this work hands to (:class:`RunnerRegistrar`, :class:`ParameterStore`)
and :class:`HandoverCalls`, the retried, counted calls that the tick's other duties
(:mod:`autoscaler.scale.handover_duties`) share with registering.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Protocol, TypeVar

from autoscaler.config import Config
from autoscaler.domain import Runner, ScalingProblem
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    ConflictError,
    NotFoundError,
    PermanentError,
    RateLimitedError,
    RejectedError,
)
from autoscaler.ports import JitRunner, JobSource, RegistrationToken, RunnerPool
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.handover import JIT, TOKEN, HandoverRecord, Register
from autoscaler.scale.handover_ledger import HandoverLedger
from autoscaler.secrets import Secret
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)
T = TypeVar("T")

#: ``jit_configs_total`` and ``registration_tokens_total`` results.
CREATED, ADOPTED, CONFLICT, REJECTED, FORBIDDEN, RATE_LIMITED, FAILED, HANDOVER_FAILED = (
    "created",
    "adopted",
    "conflict",
    "rejected",
    "forbidden",
    "rate_limited",
    "failed",
    "handover_failed",
)
#: What deleting a runner at GitHub came to.
REMOVED, GONE, BUSY = "removed", "gone", "busy"


class RunnerRegistrar(Protocol):
    """GitHub's runner registration (:class:`autoscaler.observe.github.source.GitHubSource`)."""

    def generate_jit_config(
        self, name: str, labels: Sequence[str], runner_group_id: int, work_folder: str
    ) -> JitRunner:
        """Raises ConflictError (409, name taken), RejectedError (422), AuthenticationError
        (403: missing permission), RateLimitedError/TransientError."""
        ...

    def create_registration_token(self) -> RegistrationToken:
        """A token that registers runners for an hour. Raises AuthenticationError (403),
        RateLimitedError/TransientError."""
        ...


class ParameterStore(Protocol):
    """SSM Parameter Store (:class:`autoscaler.scale.aws.ssm.SsmParameters`)."""

    def put_secret(self, name: str, value: Secret, *, instance_id: str) -> None:
        """Store (or overwrite) a SecureString tagged with the instance allowed to read it."""
        ...

    def delete(self, name: str) -> bool:
        """Delete a parameter: True when it was there, False when it did not exist (not an
        error). Of two deletes of one parameter, one gets True: a machine claims its
        registration token this way, and the controller withdraws one this way."""
        ...

    def list_names(self, path: str) -> list[str]:
        """Every parameter name under ``path``."""
        ...


@dataclass
class HandoverCalls:
    """The calls the handover duties make, each through the retry policy, counted, and
    what on-call must hear about (:attr:`problems`, this tick's)."""

    config: Config
    source: JobSource
    registrar: RunnerRegistrar
    parameters: ParameterStore
    pool: RunnerPool
    metrics: Metrics
    retry: RetryPolicy
    problems: list[ScalingProblem] = field(default_factory=list)
    #: (runner type, pool) -> instances terminated this tick.
    terminated: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Runner ids deleted at GitHub this tick (or found gone): the scaler remembers them,
    #: so a tick planning with an older runner list does not delete them again.
    removed_runners: list[int] = field(default_factory=list)

    def new_tick(self) -> None:
        self.problems, self.terminated, self.removed_runners = [], {}, []

    def terminate(self, runner_type: str, pool: str, instance_id: str) -> bool:
        try:
            self.retry.call(
                partial(self.pool.terminate_instance, pool, instance_id),
                pool=pool,
                operation="terminate",
            )
        except AutoscalerError as exc:
            self.problem(exc, runner_type, pool, "terminate")
            return False
        key = (runner_type, pool)
        self.terminated[key] = self.terminated.get(key, 0) + 1
        return True

    def remove_runner(self, runner_id: int, name: str, runner_type: str, pool: str) -> str:
        """Delete a runner at GitHub: :data:`REMOVED`, :data:`GONE` (404), :data:`BUSY`
        (422: it runs a job) or :data:`FAILED`."""
        try:
            self.source.remove_runner(runner_id)
        except NotFoundError:
            self.metrics.runner_deletions_already_gone.labels(runner_type, pool).inc()
            log.info("runner %s (id %d) is already gone at GitHub (404)", name, runner_id)
            self.removed_runners.append(runner_id)
            return GONE
        except RejectedError:
            return BUSY
        except AutoscalerError as exc:
            self.problem(exc, runner_type, pool, "remove_runner")
            return FAILED
        log.info("deleted runner %s (id %d)", name, runner_id)
        self.removed_runners.append(runner_id)
        return REMOVED

    def delete_parameter(self, pool: str, instance_id: str) -> bool | None:
        """Delete an instance's parameter: True when it was there, False when it was not,
        None when the call failed."""
        name = self.config.jit.parameter_name(pool, instance_id)
        try:
            return self.retry.call(
                partial(self.parameters.delete, name), pool=pool, operation="delete_parameter"
            )
        except AutoscalerError as exc:
            self.problem(exc, "", pool, "delete_parameter")
            return None

    def call(self, fn: Callable[[], T], operation: str) -> T | None:
        """``fn`` through the retry policy; None (and a problem) when it failed."""
        try:
            return self.retry.call(fn, operation=operation)
        except AutoscalerError as exc:
            self.problem(exc, "", "", operation)
            return None

    def count(self, kind: str, runner_type: str, result: str) -> None:
        counter = self.metrics.jit_configs if kind == JIT else self.metrics.registration_tokens
        counter.labels(runner_type, result).inc()

    def problem(self, exc: AutoscalerError, runner_type: str, pool: str, operation: str) -> None:
        if isinstance(exc, PermanentError):
            where = pool or "runner pools"
            msg = f"{operation} on {where} failed permanently: {exc.code or exc.kind}"
            log.error("%s (%s)", msg, exc)
            self.problems.append(ScalingProblem("permanent", runner_type, pool, exc.code, msg))
        else:
            log.warning(
                "%s on %s failed (%s %s); next tick retries",
                operation,
                pool or "runner pools",
                exc.kind,
                exc.code,
            )


class Registration:
    """The register duty of a tick (:class:`~autoscaler.scale.handover.Register`)."""

    def __init__(self, calls: HandoverCalls, ledger: HandoverLedger) -> None:
        self.calls = calls
        self.ledger = ledger

    def register(self, r: Register, now: datetime) -> None:
        if r.kind == TOKEN:
            self._token(r, now)
        else:
            self._jit(r, now)

    # --- persistent: a registration token

    def _token(self, r: Register, now: datetime) -> None:
        c = self.calls
        try:
            token = c.registrar.create_registration_token()
        except AutoscalerError as exc:
            c.count(TOKEN, r.runner_type, _result(exc))
            c.problem(exc, r.runner_type, r.pool, "registration_token")
            return
        # Recorded before it is stored: the orphan sweep must know of every token an
        # instance may hold (a stop between the two leaves a record, never a secret).
        before = self.ledger.records.get(r.instance_id)
        expires = token.expires_at
        if before is not None and before.expires_at is not None:
            expires = max(expires, before.expires_at)  # an earlier one may be held too
        record = HandoverRecord(
            r.instance_id,
            r.pool,
            r.runner_type,
            # a new stint (back from the warm pool) starts its clock again
            asked_at=now if before is None or before.warmed else before.asked_at,
            kind=TOKEN,
            parameter=True,
            expires_at=expires,
            stored=False,
        )
        self.ledger.put(record)
        if not self.ledger.flush():
            c.count(TOKEN, r.runner_type, FAILED)
            log.warning("registration token for %s not stored: no record", r.runner_name)
            return  # the record (stored=False) asks again next tick
        if not self._hand_over(r, token.token):
            c.count(TOKEN, r.runner_type, HANDOVER_FAILED)
            return  # the record (stored=False) asks again next tick
        self.ledger.put(replace(record, stored=True))
        c.count(TOKEN, r.runner_type, CREATED)
        log.info(
            "registration token for %s in %s (expires %s)",
            r.runner_name,
            c.config.jit.parameter_name(r.pool, r.instance_id),
            token.expires_at.isoformat(),
        )

    # --- ephemeral: a JIT config

    def _jit(self, r: Register, now: datetime) -> None:
        c = self.calls
        intent = HandoverRecord(r.instance_id, r.pool, r.runner_type, asked_at=now)
        self.ledger.put(intent)
        if not self.ledger.flush():
            c.count(JIT, r.runner_type, FAILED)
            log.warning("JIT config for %s not asked: its intent cannot be saved", r.runner_name)
            return
        try:
            jit = self._generate(r)
        except AutoscalerError as exc:
            self._generate_failed(r, exc)
            return
        if isinstance(jit, Runner):  # adopted: its runner is online already
            # A parameter may be left from before the stop: deleted once seen online.
            self.ledger.put(replace(intent, runner_id=jit.id, parameter=True))
            return
        if not self._hand_over(r, jit.encoded_jit_config):
            c.count(JIT, r.runner_type, HANDOVER_FAILED)
            removed = c.remove_runner(jit.runner_id, r.runner_name, r.runner_type, r.pool)
            if removed != FAILED:
                self.ledger.drop(r.instance_id)  # nothing registered: the next tick asks again
            log.warning("JIT config of %s not handed over: runner deleted", r.runner_name)
            return
        self.ledger.put(replace(intent, runner_id=jit.runner_id, parameter=True))
        c.count(JIT, r.runner_type, CREATED)
        log.info(
            "JIT runner %s (id %d) registered, config in %s",
            r.runner_name,
            jit.runner_id,
            c.config.jit.parameter_name(r.pool, r.instance_id),
        )

    def _generate(self, r: Register) -> JitRunner | Runner:
        """The config, or the runner of this name when it is online already (adopted)."""
        c = self.calls
        ask = partial(
            c.registrar.generate_jit_config,
            r.runner_name,
            r.labels,
            r.runner_group_id,
            c.config.jit.work_folder,
        )
        try:
            return ask()
        except ConflictError:
            c.count(JIT, r.runner_type, CONFLICT)
            log.warning("JIT runner name %s is taken (409): resolving by name", r.runner_name)
        existing = c.source.find_runner(r.runner_name)
        if existing is not None and existing.online:
            c.count(JIT, r.runner_type, ADOPTED)
            log.info("runner %s is online already: adopted, no second config", r.runner_name)
            return existing
        if existing is not None:
            outcome = c.remove_runner(existing.id, existing.name, r.runner_type, r.pool)
            if outcome == BUSY:
                c.count(JIT, r.runner_type, ADOPTED)
                return existing
        return ask()

    def _generate_failed(self, r: Register, exc: AutoscalerError) -> None:
        c = self.calls
        c.count(JIT, r.runner_type, _result(exc))
        c.problem(exc, r.runner_type, r.pool, "generate_jitconfig")
        if isinstance(exc, PermanentError) and not isinstance(exc, ConflictError):
            self.ledger.drop(r.instance_id)  # GitHub created nothing; asked again next tick
            self.ledger.flush()
        # transient: GitHub may have created it; the kept intent recovers next tick

    def _hand_over(self, r: Register, secret: Secret) -> bool:
        """Store ``secret`` as the instance's own parameter; False (and a problem) when
        that failed after the retry policy's attempts."""
        c = self.calls
        name = c.config.jit.parameter_name(r.pool, r.instance_id)
        try:
            c.retry.call(
                partial(c.parameters.put_secret, name, secret, instance_id=r.instance_id),
                pool=r.pool,
                operation="put_parameter",
            )
        except AutoscalerError as exc:
            c.problem(exc, r.runner_type, r.pool, "put_parameter")
            return False
        return True


def _result(exc: AutoscalerError) -> str:
    if isinstance(exc, RejectedError):
        return REJECTED
    if isinstance(exc, AuthenticationError):
        return FORBIDDEN
    if isinstance(exc, RateLimitedError):
        return RATE_LIMITED
    return FAILED
