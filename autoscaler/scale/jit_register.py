"""Registering one JIT runner for one new instance, in an order that survives a stop.

Steps 1-4 of :mod:`autoscaler.scale.jit` (intent saved, ``generate-jitconfig`` with its
409 resolved by name, the config handed over through SSM, the record saved) and the
answers they can get: ``ci_autoscaler_jit_configs_total{runner_type,result}`` counts each.
They live apart from the tick's other duties because they are the only ones that create
anything (a runner at GitHub, a parameter in SSM), through the two ports defined here:
:class:`RunnerRegistrar` and :class:`ParameterStore` (whose ``delete`` and ``list_names``
the other duties use to clean up).
:class:`JitRegistration` is a base class of
:class:`~autoscaler.scale.jit.EphemeralRunners`: its methods use the runners' ports,
ledger and helpers (:class:`_Runners` says which), so the code reads as it did in one
class.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Protocol

from autoscaler.config import Config
from autoscaler.domain import Runner
from autoscaler.errors import (
    AuthenticationError,
    AutoscalerError,
    ConflictError,
    PermanentError,
    RateLimitedError,
    RejectedError,
)
from autoscaler.ports import JitRunner, JobSource
from autoscaler.retrying import RetryPolicy
from autoscaler.scale.ephemeral import JitRecord, Register
from autoscaler.scale.jit_ledger import JitLedger
from autoscaler.secrets import Secret

#: Said under the tick's own name: one logger for every JIT line, as before the split.
log = logging.getLogger("autoscaler.scale.jit")

#: ``jit_configs_total`` results.
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


class RunnerRegistrar(Protocol):
    """GitHub's generate-jitconfig (:class:`autoscaler.observe.github.source.GitHubSource`)."""

    def generate_jit_config(
        self, name: str, labels: Sequence[str], runner_group_id: int, work_folder: str
    ) -> JitRunner:
        """Raises ConflictError (409, name taken), RejectedError (422), AuthenticationError
        (403: missing permission), RateLimitedError/TransientError."""
        ...


class ParameterStore(Protocol):
    """SSM Parameter Store (:class:`autoscaler.scale.aws.ssm.SsmParameters`)."""

    def put_secret(self, name: str, value: Secret, *, instance_id: str) -> None:
        """Store (or overwrite) a SecureString tagged with the instance allowed to read it."""
        ...

    def delete(self, name: str) -> None:
        """Delete a parameter; one that does not exist is not an error."""
        ...

    def list_names(self, path: str) -> list[str]:
        """Every parameter name under ``path``."""
        ...


class _Runners(Protocol):
    """What registering uses of :class:`~autoscaler.scale.jit.EphemeralRunners`."""

    config: Config
    source: JobSource
    registrar: RunnerRegistrar
    parameters: ParameterStore
    retry: RetryPolicy
    ledger: JitLedger

    def _generate(self, r: Register) -> JitRunner | Runner: ...

    def _generate_failed(self, r: Register, exc: AutoscalerError) -> None: ...

    def _remove(self, runner_id: int, name: str, runner_type: str, pool: str) -> str: ...

    def _count(self, runner_type: str, result: str) -> None: ...

    def _problem(
        self, exc: AutoscalerError, runner_type: str, pool: str, operation: str
    ) -> None: ...


class JitRegistration:
    """The register duty of a tick (:class:`~autoscaler.scale.ephemeral.Register`)."""

    def _register(self: _Runners, r: Register, now: datetime) -> None:
        intent = JitRecord(r.instance_id, r.pool, r.runner_type, asked_at=now)
        self.ledger.put(intent)
        if not self.ledger.flush():
            self._count(r.runner_type, FAILED)
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
        name = self.config.jit.parameter_name(r.pool, r.instance_id)
        try:
            self.retry.call(
                partial(
                    self.parameters.put_secret,
                    name,
                    jit.encoded_jit_config,
                    instance_id=r.instance_id,
                ),
                pool=r.pool,
                operation="put_parameter",
            )
        except AutoscalerError as exc:
            self._count(r.runner_type, HANDOVER_FAILED)
            self._problem(exc, r.runner_type, r.pool, "put_parameter")
            if self._remove(jit.runner_id, r.runner_name, r.runner_type, r.pool) != "failed":
                self.ledger.drop(r.instance_id)  # nothing registered: the next tick asks again
            log.warning("JIT config of %s not handed over (%s): runner deleted", name, exc.kind)
            return
        self.ledger.put(replace(intent, runner_id=jit.runner_id, parameter=True))
        self._count(r.runner_type, CREATED)
        log.info(
            "JIT runner %s (id %d) registered, config in %s", r.runner_name, jit.runner_id, name
        )

    def _generate(self: _Runners, r: Register) -> JitRunner | Runner:
        """The config, or the runner of this name when it is online already (adopted)."""
        ask = partial(
            self.registrar.generate_jit_config,
            r.runner_name,
            r.labels,
            r.runner_group_id,
            self.config.jit.work_folder,
        )
        try:
            return ask()
        except ConflictError:
            self._count(r.runner_type, CONFLICT)
            log.warning("JIT runner name %s is taken (409): resolving by name", r.runner_name)
        existing = self.source.find_runner(r.runner_name)
        if existing is not None and existing.online:
            self._count(r.runner_type, ADOPTED)
            log.info("runner %s is online already: adopted, no second config", r.runner_name)
            return existing
        if existing is not None:
            outcome = self._remove(existing.id, existing.name, r.runner_type, r.pool)
            if outcome == "busy":
                self._count(r.runner_type, ADOPTED)
                return existing
        return ask()

    def _generate_failed(self: _Runners, r: Register, exc: AutoscalerError) -> None:
        result = (
            REJECTED
            if isinstance(exc, RejectedError)
            else FORBIDDEN
            if isinstance(exc, AuthenticationError)
            else RATE_LIMITED
            if isinstance(exc, RateLimitedError)
            else FAILED
        )
        self._count(r.runner_type, result)
        self._problem(exc, r.runner_type, r.pool, "generate_jitconfig")
        if isinstance(exc, PermanentError) and not isinstance(exc, ConflictError):
            self.ledger.drop(r.instance_id)  # GitHub created nothing; asked again next tick
            self.ledger.flush()
        # transient: GitHub may have created it; the kept intent recovers next tick
