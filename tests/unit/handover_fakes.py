"""Hand-written fakes of the handover ports: GitHub's generate-jitconfig (over the
FakeSource's runners, so find/remove see what it created) and registration-token, SSM
parameters (a delete says whether the parameter was there), the ledger."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from autoscaler.domain import Runner
from autoscaler.errors import AutoscalerError, ConflictError
from autoscaler.ports import JitRunner, RegistrationToken
from autoscaler.secrets import Secret
from tests.unit.scaling_fakes import T0, FakeSource


@dataclass
class FakeRegistrar:
    """generate-jitconfig as GitHub documents it: the runner exists (offline) at once;
    a taken name is a 409."""

    source: FakeSource
    errors: list[AutoscalerError] = field(default_factory=list)
    asked: list[tuple[str, tuple[str, ...], int, str]] = field(default_factory=list)
    next_id: int = 5000
    #: Runs after GitHub created the runner, before the answer reaches the controller.
    after_create: Callable[[str], None] | None = None
    #: GitHub's clock: registration tokens expire an hour after it.
    now: datetime = T0
    #: Registration tokens issued: token -> expiry.
    tokens: dict[str, datetime] = field(default_factory=dict)
    token_errors: list[AutoscalerError] = field(default_factory=list)

    def generate_jit_config(
        self, name: str, labels: Sequence[str], runner_group_id: int, work_folder: str
    ) -> JitRunner:
        self.asked.append((name, tuple(labels), runner_group_id, work_folder))
        if self.errors:
            raise self.errors.pop(0)
        if any(r.name == name for r in self.source.runners.values()):
            raise ConflictError("Already exists - A runner with the same name", code="409")
        self.next_id += 1
        self.source.runners[self.next_id] = Runner(
            self.next_id, name, frozenset(labels), online=False, busy=False
        )
        if self.after_create is not None:
            self.after_create(name)
        return JitRunner(self.next_id, Secret(f"jit-{self.next_id}"))

    def create_registration_token(self) -> RegistrationToken:
        if self.token_errors:
            raise self.token_errors.pop(0)
        token = f"REGTOKEN{len(self.tokens) + 1:04d}"
        self.tokens[token] = self.now + timedelta(hours=1)
        return RegistrationToken(Secret(token), self.tokens[token])


@dataclass
class FakeParameters:
    values: dict[str, tuple[str, str]] = field(default_factory=dict)
    """name -> (value, instance id tag)."""
    errors: dict[str, list[AutoscalerError]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def _maybe_fail(self, op: str) -> None:
        queue = self.errors.get(op)
        if queue:
            raise queue.pop(0)

    def put_secret(self, name: str, value: Secret, *, instance_id: str) -> None:
        self.calls.append(("put", name))
        self._maybe_fail("put")
        self.values[name] = (value.reveal(), instance_id)

    def delete(self, name: str) -> bool:
        self.calls.append(("delete", name))
        self._maybe_fail("delete")
        return self.values.pop(name, None) is not None

    def list_names(self, path: str) -> list[str]:
        self.calls.append(("list", path))
        self._maybe_fail("list")
        return sorted(n for n in self.values if n.startswith(path + "/"))


@dataclass
class FakeLedgerStore:
    records: dict[str, str] = field(default_factory=dict)
    errors: list[AutoscalerError] = field(default_factory=list)

    def load_jit_records(self) -> dict[str, str]:
        if self.errors:
            raise self.errors.pop(0)
        return dict(self.records)

    def save_jit_records(self, put: Mapping[str, str], drop: Collection[str]) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.records.update(put)
        for key in drop:
            self.records.pop(key, None)


def handover_ports(source: Any) -> dict[str, Any]:
    """The Scaler's ``registrar`` and ``parameters`` over ``source``: fakes that hand every
    persistent instance a token and every ephemeral one a JIT config."""
    return {"registrar": FakeRegistrar(source), "parameters": FakeParameters()}


class RegisteringSource(FakeSource):
    """A FakeSource that also registers runners, as GitHubSource does."""

    def __init__(self) -> None:
        super().__init__()
        registrar = FakeRegistrar(self)
        self.generate_jit_config = registrar.generate_jit_config
        self.create_registration_token = registrar.create_registration_token
