"""The leader lease as pure logic over a hand-written table: taken, renewed,
watched, taken over only after a whole unchanged lease, lost when it lapses, released.

Time is one shared fake monotonic clock (every process measures with the same rate); the
property test at the end drives several processes with random steps, pauses and request
latencies and checks that at no instant do two of them act.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.errors import StateError, StateUnavailableError
from autoscaler.state.lease import MARGIN_SHARE, Event, Lease, LeaseRecord

D = 30.0  # the lease


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeTable:
    """The lease item in memory, conditional writes atomic as DynamoDB makes them.

    ``fail`` raises on the next call; ``lose_answer`` applies the next write and then
    raises (the answer was lost); ``latency`` advances the clock before and after a call
    applies (a request in flight)."""

    clock: Clock
    record: LeaseRecord | None = None
    fail: int = 0
    lose_answer: int = 0
    latency: Callable[[], tuple[float, float]] = lambda: (0.0, 0.0)
    meanwhile: Callable[[], None] = lambda: None
    """Runs after a call applied, before its answer arrives (another process's step)."""
    calls: list[str] = field(default_factory=list)

    def _call(self, name: str, write: Callable[[], bool] | None = None) -> bool:
        self.calls.append(name)
        before, after = self.latency()
        self.clock.advance(before)
        if self.fail:
            self.fail -= 1
            raise StateUnavailableError("unreachable", path="t", code="unreachable")
        done = write() if write is not None else True
        self.meanwhile()
        self.clock.advance(after)
        if self.lose_answer and write is not None:
            self.lose_answer -= 1
            raise StateUnavailableError("timed out", path="t", code="Timeout")
        return done

    def read_lease(self) -> LeaseRecord | None:
        self._call("read")
        return self.record

    def create_lease(self, record: LeaseRecord) -> bool:
        def write() -> bool:
            if self.record is not None:
                return False
            self.record = record
            return True

        return self._call("create", write)

    def replace_lease(self, expected_version: str, record: LeaseRecord) -> bool:
        def write() -> bool:
            if self.record is None or self.record.version != expected_version:
                return False
            self.record = record
            return True

        return self._call("replace", write)


_versions = itertools.count()


def lease(table: FakeTable, owner: str, duration: float = D) -> Lease:
    return Lease(
        table,
        owner,
        duration,
        monotonic=table.clock,
        wall_clock=lambda: 1.8e9 + table.clock.now,
        new_version=lambda: f"v{next(_versions)}",
    )


@pytest.fixture
def table() -> FakeTable:
    return FakeTable(Clock())


def test_the_first_controller_creates_the_lease_and_acts_until_the_margin(
    table: FakeTable,
) -> None:
    a = lease(table, "a")
    step = a.step()
    assert step.event is Event.ACQUIRED and step.previous is None
    assert table.record is not None and (table.record.owner, table.record.epoch) == ("a", 1)
    assert a.acting() and a.token() == ("a", 1)
    table.clock.advance(D * (1 - MARGIN_SHARE) - 0.001)
    assert a.acting()
    table.clock.advance(0.002)
    assert not a.acting() and a.token() is None, "within the margin: no more actions"


def test_renewals_keep_the_leader_acting_and_change_the_version(table: FakeTable) -> None:
    a = lease(table, "a")
    a.step()
    versions = set()
    for _ in range(10):
        table.clock.advance(a.next_step_in())
        assert a.step().event is Event.RENEWED
        assert table.record is not None
        versions.add(table.record.version)
        assert a.acting()
    assert len(versions) == 10 and table.record is not None and table.record.epoch == 1
    assert a.next_step_in() == pytest.approx(D / 3)


def test_a_follower_takes_over_only_after_a_whole_unchanged_lease(table: FakeTable) -> None:
    a, b = lease(table, "a"), lease(table, "b")
    a.step()
    assert b.step().event is Event.FOLLOWING  # first sight of a's version
    table.clock.advance(D - 0.01)
    assert b.step().event is Event.FOLLOWING and not b.acting()
    assert b.next_step_in() == pytest.approx(0.01)  # due exactly when it expires
    table.clock.advance(0.01)
    step = b.step()
    assert step.event is Event.ACQUIRED and step.previous is not None
    assert step.previous.owner == "a"
    assert table.record is not None and (table.record.owner, table.record.epoch) == ("b", 2)
    assert b.acting() and not a.acting(), "a stopped acting a margin before"


def test_a_renewal_restarts_the_followers_wait(table: FakeTable) -> None:
    a, b = lease(table, "a"), lease(table, "b")
    a.step()
    b.step()
    for _ in range(6):  # two leases' worth of renewals
        table.clock.advance(D / 3)
        a.step()
        assert b.step().event is Event.FOLLOWING
    assert a.acting() and not b.acting()


def test_a_leader_that_cannot_renew_stops_acting_then_loses_it(table: FakeTable) -> None:
    a = lease(table, "a")
    a.step()
    table.fail = 100
    table.clock.advance(D / 3)
    failed = a.step()
    assert failed.event is Event.ERROR and isinstance(failed.error, StateError)
    assert a.acting(), "one failed renewal: still two thirds of the lease left"
    assert a.next_step_in() == pytest.approx(D / 6), "tried again soon"
    table.clock.advance(D / 2)
    assert not a.acting()
    table.clock.advance(D)
    assert a.step().event is Event.LOST


def test_a_paused_leader_wakes_up_acting_on_nothing(table: FakeTable) -> None:
    """The process was stopped (GC, SIGSTOP) past its lease and a follower took over: on
    waking, neither its token nor its next step lets it act; its record is gone."""
    a, b = lease(table, "a"), lease(table, "b")
    a.step()
    b.step()
    table.clock.advance(D)  # a is frozen: no renewal
    assert b.step().event is Event.ACQUIRED
    assert a.token() is None and not a.acting()
    assert a.step().event is Event.LOST
    assert a.step().event is Event.FOLLOWING


def test_a_renewal_that_lost_to_a_takeover_is_lost(table: FakeTable) -> None:
    """a's renewal was in flight while b took over: its compare-and-set fails, it reads
    the lease, sees b's, and follows."""
    a, b = lease(table, "a"), lease(table, "b")
    a.step()
    b.step()
    table.clock.advance(D - 1)
    in_flight = [True]

    def b_takes_over_meanwhile() -> tuple[float, float]:
        if in_flight.pop() if in_flight else False:
            table.clock.advance(1.5)
            assert b.step().event is Event.ACQUIRED
        return 0.0, 0.0

    table.latency = b_takes_over_meanwhile
    lost = a.step()
    assert lost.event is Event.LOST and lost.record is not None and lost.record.owner == "b"
    assert not a.acting() and b.acting()


def test_the_leader_counts_its_lease_from_sending_the_renewal_not_from_the_answer(
    table: FakeTable,
) -> None:
    """The follower may read the new version the moment it applied, while the leader is
    still waiting for the answer (here 3 s, more than the margin). The follower's wait
    starts there; had the leader counted from the answer, it would still act when the
    follower takes over."""
    a, b = lease(table, "a"), lease(table, "b")
    a.step()
    b.step()
    table.clock.advance(D / 3)
    reads = [True]

    def b_reads_in_flight() -> None:
        if reads.pop() if reads else False:
            assert b.step().event is Event.FOLLOWING  # a's new version, just applied

    table.meanwhile = b_reads_in_flight
    table.latency = lambda: (0.0, 3.0)
    assert a.step().event is Event.RENEWED
    table.latency = lambda: (0.0, 0.0)
    table.clock.advance(D - 3.0)  # a frozen from here on
    assert b.step().event is Event.ACQUIRED
    assert not a.acting()


def test_a_renewal_whose_answer_was_lost_is_adopted(table: FakeTable) -> None:
    """The write applied, the answer never came: the next renewal finds its own record
    (same owner, same epoch) and goes on from it instead of giving the lease up."""
    a = lease(table, "a")
    a.step()
    table.lose_answer = 1
    table.clock.advance(D / 3)
    assert a.step().event is Event.ERROR
    table.clock.advance(D / 6)
    assert a.step().event is Event.RENEWED
    assert a.acting() and table.record is not None and table.record.epoch == 1


def test_a_takeover_whose_answer_was_lost_is_taken_at_the_next_step(table: FakeTable) -> None:
    """Seen in the kill -9 e2e test on a loaded machine: a follower's takeover write
    applied in DynamoDB but its answer timed out. The follower then read its own record,
    watched it like anyone else's and took the lease over from itself only a whole lease
    later: a lease of nobody acting, failover time doubled. Now its next step takes its own
    record at once (conditional on that version: nobody else can hold it)."""
    a, b = lease(table, "a"), lease(table, "b")
    a.step()
    b.step()
    table.clock.advance(D)  # a died
    table.lose_answer = 1
    assert b.step().event is Event.ERROR
    assert table.record is not None and table.record.owner == "b" and not b.acting()
    table.clock.advance(D / 6)
    taken = b.step()
    assert taken.event is Event.ACQUIRED and b.acting()
    assert taken.record is not None and taken.record.epoch == 3, "a new epoch: fenced again"
    assert table.record == taken.record


def test_a_lapsed_leader_retakes_its_own_lease_nobody_took(table: FakeTable) -> None:
    """Alone, a leader that could not renew in time stops acting (LOST), but the item is
    still its own and unchanged: its next watch takes it again instead of waiting a lease."""
    a = lease(table, "a")
    a.step()
    table.clock.advance(D)
    assert a.step().event is Event.LOST and not a.acting()
    assert a.step().event is Event.ACQUIRED and a.acting()
    assert table.record is not None and table.record.epoch == 2


def test_two_followers_racing_for_an_expired_lease_one_wins(table: FakeTable) -> None:
    a, b, c = lease(table, "a"), lease(table, "b"), lease(table, "c")
    a.step()
    b.step()
    c.step()
    table.clock.advance(D)
    results = [b.step().event, c.step().event]
    assert sorted(e.value for e in results) == ["acquired", "following"]
    assert [x.acting() for x in (a, b, c)].count(True) == 1


def test_a_released_lease_is_taken_at_once(table: FakeTable) -> None:
    a, b = lease(table, "a"), lease(table, "b")
    a.step()
    b.step()
    assert a.release().event is Event.RELEASED
    assert not a.acting()
    assert table.record is not None and table.record.owner == ""
    step = b.step()
    assert step.event is Event.ACQUIRED
    assert table.record.epoch == 2, "a new holder is a new epoch"


def test_the_follower_waits_the_holders_duration_not_its_own(table: FakeTable) -> None:
    """During a deploy that lengthens the lease, the old leader's promise is what counts."""
    a = lease(table, "a", duration=60.0)
    b = lease(table, "b", duration=10.0)
    a.step()
    b.step()
    table.clock.advance(30.0)
    assert b.step().event is Event.FOLLOWING
    table.clock.advance(30.0)
    assert b.step().event is Event.ACQUIRED


def test_a_failed_read_leaves_the_follower_as_it_was(table: FakeTable) -> None:
    a, b = lease(table, "a"), lease(table, "b")
    a.step()
    table.fail = 1
    step = b.step()
    assert step.event is Event.ERROR and not b.acting()
    assert b.next_step_in() == pytest.approx(D / 6)


@dataclass
class World:
    """Several processes over one table and one clock; who acts is checked whenever a
    process could have started acting."""

    table: FakeTable
    leases: list[Lease]

    def acting(self) -> int:
        return sum(1 for x in self.leases if x.acting())


#: Time passing between steps, a lease being 10: around its thirds (renewal), sixths
#: (watching), the margin (8) and the whole of it, where an off-by-a-little shows.
WAITS = st.sampled_from([0.0, 0.0, 0.0, 0.5, 2.5, 3.4, 5.0, 7.5, 7.9, 8.1, 10.0])
#: A request's time in flight before it applies and after (mostly instant, some slow).
LATENCIES = st.sampled_from([0.0, 0.0, 0.0, 0.0, 0.1, 1.5, 3.0])


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2),  # who steps
            WAITS,  # time passing first (a lease is 10)
            LATENCIES,  # request latency before it applies
            LATENCIES,  # and after
            st.integers(min_value=0, max_value=9).map(lambda n: n == 0),  # it fails
            st.integers(min_value=-1, max_value=2),  # who steps while it is in flight
        ),
        min_size=3,
        max_size=60,
    )
)
def test_never_two_acting_at_once(
    schedule: list[tuple[int, float, float, float, bool, int]],
) -> None:
    """Random steps, pauses (a process not stepped for long), slow and failing requests,
    another process stepping while a request is in flight: at every moment, at most one
    process may act."""
    clock = Clock()
    pending: list[tuple[float, float]] = []
    between: list[Lease] = []
    table = FakeTable(clock, latency=lambda: pending.pop() if pending else (0.0, 0.0))
    world = World(table, [lease(table, name, duration=10.0) for name in "abc"])

    def meanwhile() -> None:
        if between:
            between.pop().step()
            assert world.acting() <= 1, f"two acting at {clock.now} (in flight)"

    table.meanwhile = meanwhile
    for who, wait, before, after, fails, other in schedule:
        clock.advance(wait)
        assert world.acting() <= 1
        pending[:] = [(before, after)] * 3
        between[:] = [world.leases[other]] if other >= 0 and other != who else []
        table.fail = 1 if fails else 0
        world.leases[who].step()
        assert world.acting() <= 1, f"two acting at {clock.now}"
