"""The group committer: a delivery's row is answered only once the write that holds it
returned, rows that wait during a write go together in the next one, and a failed
write fails every row it held (each handler answers 503)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

import pytest

from autoscaler.errors import StateError, StateUnusableError
from autoscaler.observe.github.group_commit import GroupCommit
from autoscaler.observe.github.webhook_rows import EVENT, Changes, IndexRow, Outcome


def row(job_id: int) -> IndexRow:
    return IndexRow(job_id, 0, "{}", 1_800_000_000.0, EVENT)


class GatedStore:
    """A job index store whose writes wait for ``gate`` and can be made to fail."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.writing = threading.Event()
        self.batches: list[list[int]] = []
        self.fail: Exception | None = None

    def record_job_events(self, rows: Sequence[IndexRow]) -> list[Outcome | StateError]:
        self.writing.set()
        assert self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        self.batches.append([r.job_id for r in rows])
        return [Outcome.ACCEPTED] * len(rows)

    def load_job_index(self, now: float) -> list[IndexRow]:
        return []

    def job_index_changes(self, cursor: object | None) -> Changes:
        return Changes((), None)

    def prune_job_index(self, now: float) -> None:
        pass

    def reconcile_job_index(self, put: Sequence[IndexRow], drop: Sequence[IndexRow]) -> None:
        pass

    def job_index_version(self) -> str | None:
        return None


def wait_all(futures: Sequence[Future[Outcome]]) -> None:
    for future in futures:
        future.exception(10)


def test_rows_that_wait_during_a_write_go_together_and_none_is_answered_before_its_write() -> None:
    store = GatedStore()
    commits = GroupCommit(store)
    first = commits.submit(row(1))
    assert store.writing.wait(10)
    rest = [commits.submit(row(i)) for i in range(2, 6)]
    assert not first.done() and not any(f.done() for f in rest), "answered before durable"
    store.gate.set()
    wait_all([first, *rest])
    assert store.batches == [[1], [2, 3, 4, 5]]
    assert [f.result() for f in [first, *rest]] == [Outcome.ACCEPTED] * 5
    commits.close()


def test_a_batch_never_holds_more_than_max_batch_rows() -> None:
    store = GatedStore()
    commits = GroupCommit(store, max_batch=2)
    futures = [commits.submit(row(1))]
    assert store.writing.wait(10)
    futures += [commits.submit(row(i)) for i in range(2, 7)]
    store.gate.set()
    wait_all(futures)
    assert store.batches == [[1], [2, 3], [4, 5], [6]]
    commits.close()


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        pytest.param(
            StateUnusableError("read-only", path="state.db", code="read_only"),
            StateUnusableError,
            id="store-error-each-row-gets-it",
        ),
        pytest.param(RuntimeError("a bug"), RuntimeError, id="bug-each-row-gets-it"),
    ],
)
def test_a_failed_write_fails_every_row_it_held_and_the_committer_goes_on(
    error: Exception, kind: type[Exception]
) -> None:
    store = GatedStore()
    store.fail = error
    commits = GroupCommit(store)
    futures = [commits.submit(row(1))]
    assert store.writing.wait(10)
    futures += [commits.submit(row(2)), commits.submit(row(3))]
    store.gate.set()
    wait_all(futures)
    assert all(isinstance(f.exception(), kind) for f in futures)
    store.fail = None
    assert commits.submit(row(4)).result(10) is Outcome.ACCEPTED
    assert store.batches == [[4]]
    commits.close()


def test_close_writes_what_waits_and_refuses_what_comes_after() -> None:
    store = GatedStore()
    commits = GroupCommit(store)
    futures = [commits.submit(row(1))]
    assert store.writing.wait(10)
    futures.append(commits.submit(row(2)))
    closing = threading.Thread(target=commits.close)
    closing.start()
    store.gate.set()
    closing.join(10)
    assert [f.result(0) for f in futures] == [Outcome.ACCEPTED] * 2
    assert store.batches == [[1], [2]]
    late = commits.submit(row(3)).exception(0)
    assert isinstance(late, StateError) and late.code == "closed"
