"""``readers.parallel.in_order``: per-partition work on threads, answered in order."""

from __future__ import annotations

import threading
import time

import pytest

from statelens.readers.errors import CorruptFileError
from statelens.readers.parallel import in_order


def test_results_come_in_order_whatever_finishes_first() -> None:
    def work(i: int) -> int:
        time.sleep(0.02 * (5 - i))  # the first items finish last
        return i * i

    got = list(in_order(work, list(range(6)), workers=3))
    assert got == [(i, i * i, None) for i in range(6)]


def test_items_run_at_the_same_time() -> None:
    barrier = threading.Barrier(2, timeout=5)

    def work(i: int) -> int:
        barrier.wait()  # only passes when two items run at once
        return i

    assert [r for _, r, _ in in_order(work, [0, 1, 2, 3], workers=2)] == [0, 1, 2, 3]


def test_typed_errors_are_answers_and_others_propagate() -> None:
    def work(i: int) -> int:
        if i == 1:
            raise CorruptFileError("bad bytes", path=f"state/0/{i}/2.delta")
        return i

    got = list(in_order(work, [0, 1, 2], workers=2))
    assert [(i, r) for i, r, _ in got] == [(0, 0), (1, None), (2, 2)]
    assert isinstance(got[1][2], CorruptFileError) and "state/0/1/2.delta" in str(got[1][2])

    def broken(i: int) -> int:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        list(in_order(broken, [0, 1], workers=2))


@pytest.mark.parametrize("workers", [1, 2])
def test_cancel_starts_nothing_more(workers: int) -> None:
    started: list[int] = []
    stop = threading.Event()

    def work(i: int) -> int:
        started.append(i)
        return i

    seen = []
    for i, _, _ in in_order(work, list(range(100)), workers=workers, cancelled=stop.is_set):
        seen.append(i)
        if i == 3:
            stop.set()
    assert seen == [0, 1, 2, 3]
    assert len(started) <= 4 + workers + 1  # what was already running or queued, no more
