"""Hand-written fakes of the ephemeral ports: GitHub's generate-jitconfig (over the
FakeSource's runners, so find/remove see what it created), SSM parameters, the ledger."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.domain import Runner
from autoscaler.errors import AutoscalerError, ConflictError
from autoscaler.ports import JitRunner
from autoscaler.secrets import Secret
from tests.unit.scaling_fakes import FakeSource


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

    def delete(self, name: str) -> None:
        self.calls.append(("delete", name))
        self._maybe_fail("delete")
        self.values.pop(name, None)

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
