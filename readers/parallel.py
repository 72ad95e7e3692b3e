"""Per-partition work on a few threads, answered in order.

Decoding a partition spends most of its time where Python lets go of the GIL (reading files,
decompressing, numpy and Arrow kernels), so two or more partitions decoded at once use the cores a
desktop has; remote files (S3) also overlap their latency. Results come back in the order asked, so
tables, progress and errors read as if the work ran one partition after another.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from statelens.readers.errors import StatelensError

__all__ = ["WORKERS", "in_order"]

T = TypeVar("T")
R = TypeVar("R")

#: Threads per job (``$STATELENS_THREADS`` overrides; 1 runs everything on the caller's thread).
WORKERS = max(1, int(os.environ.get("STATELENS_THREADS", "0") or 0) or min(4, os.cpu_count() or 1))


def in_order(
    func: Callable[[T], R],
    items: Sequence[T],
    workers: int | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Iterator[tuple[T, R | None, StatelensError | None]]:
    """``(item, func(item), None)``, or ``(item, None, error)`` when it raised a ``StatelensError``, for
    every item in order, computed on up to ``workers`` threads (at most ``workers + 1`` items ahead).

    Other exceptions propagate. When ``cancelled()`` turns true, or the caller stops iterating, no more
    items start; those running finish first.
    """
    workers = WORKERS if workers is None else max(1, workers)

    def run(item: T) -> tuple[R | None, StatelensError | None]:
        try:
            return func(item), None
        except StatelensError as err:
            return None, err

    if workers == 1 or len(items) <= 1:
        for item in items:
            if cancelled is not None and cancelled():
                return
            yield (item, *run(item))
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="statelens-decode") as pool:
        upcoming = iter(items)
        pending: deque[tuple[T, Future[Any]]] = deque(
            (item, pool.submit(run, item)) for item in itertools.islice(upcoming, workers + 1)
        )
        try:
            while pending:
                item, future = pending.popleft()
                yield (item, *future.result())
                if cancelled is not None and cancelled():
                    return
                for nxt in itertools.islice(upcoming, 1):
                    pending.append((nxt, pool.submit(run, nxt)))
        finally:
            for _, future in pending:
                future.cancel()
