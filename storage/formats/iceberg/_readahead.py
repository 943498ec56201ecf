"""Ordered, bounded read-ahead: fetch the next few items on worker threads while the caller
works on the current one.

Listing a snapshot reads its manifests one after the other; on an object store each read is a
round trip or two, and on any store the read waits while nothing is decoded. ``read_ahead``
keeps up to ``window`` fetches in flight and hands results back in the items' order, so the
listing stays an ordered stream and memory stays bounded by the window. Stopping early (the
generator closed or dropped half-way) cancels the fetches not started and waits for the ones
running, so no thread outlives the listing and nothing more is downloaded.

A listing dropped half-way is closed by the garbage collector, which may run anywhere: inside
``Thread.start`` of another thread, while that thread holds ``threading``'s own locks. Joining
the workers there deadlocks (seen in CI: a new thread stuck in its bootstrap, finalizing a dropped
listing, waiting for the lock it held itself). So when the collector closes a listing, or one of
the pool's own workers does, the fetches not started are cancelled and the running ones finish on
their own, without the wait; a consumer that closes or drops it waits as before.
"""

from __future__ import annotations

import gc
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Manifests fetched ahead of the one being decoded: enough to keep an object store busy while
#: the listing decodes, few enough that the bytes held stay small...
WINDOW = 32
#: ...on at most this many threads: the fetches past them wait in the pool's queue, so a thread
#: done with one takes the next at once rather than when the listing reaches the first. On
#: SeaweedFS on two cores (500 manifests) 32 on 16 threads listed 3-10% faster than 16 on 16,
#: and that 5-8% faster than 8 on 8 (bench/RESULTS.md)...
THREADS = 16
#: ...and at most this many bytes of them (by ``weight``, a manifest's length in its list) beyond
#: the first two in flight: 32 manifests of up to 2 MB, 8 of Iceberg's default 8 MB. Held in
#: memory they are larger once inflated (about 2.7 times for the bench's manifests): for 8 MB
#: manifests that is what the window of 8 held before, for small ones a few MB.
BUDGET = 64 << 20
THREAD_PREFIX = "lakewarden-read-ahead"


def read_ahead(
    items: Iterable[T],
    fetch: Callable[[T], R],
    window: int = WINDOW,
    weight: Callable[[T], int] | None = None,
    budget: int = BUDGET,
) -> Iterator[tuple[T, R]]:
    """(item, fetch(item)) for each item, in order, with up to ``window`` fetches running ahead,
    and, with ``weight``, no more once their weights add up to ``budget`` (two at least).

    ``items`` is pulled lazily, at most ``window`` ahead of the consumer; an exception raised
    while pulling it or by ``fetch`` is raised when the consumer reaches that position, as a
    sequential loop would. With a window below 2 it is that sequential loop."""
    source = iter(items)
    if window < 2:
        for item in source:
            yield item, fetch(item)
        return
    pool: ThreadPoolExecutor | None = None
    pending: deque[tuple[T, Future[R], int] | BaseException] = deque()
    exhausted = False
    held = 0  # the weights of the items in ``pending``

    def pull() -> None:
        nonlocal pool, exhausted, held
        try:
            item = next(source)
        except StopIteration:
            exhausted = True
            return
        except Exception as exc:  # raised in order, when the consumer gets there
            exhausted = True
            pending.append(exc)
            return
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=min(window, THREADS), thread_name_prefix=THREAD_PREFIX)
        heavy = max(0, weight(item)) if weight is not None else 0
        held += heavy
        pending.append((item, pool.submit(fetch, item), heavy))

    def room() -> bool:
        return not exhausted and len(pending) < window and (held < budget or len(pending) < 2)

    try:
        while room():
            pull()
        while pending:
            head = pending.popleft()
            if isinstance(head, BaseException):
                raise head
            item, future, heavy = head
            result = future.result()
            held -= heavy
            while room():
                pull()
            yield item, result
    finally:
        _stop(pending, pool)


def _stop(pending: deque[tuple[T, Future[R], int] | BaseException], pool: ThreadPoolExecutor | None) -> None:
    """Cancels the fetches not started; waits for the running ones where ``may_join`` lets it."""
    for entry in pending:
        if not isinstance(entry, BaseException):
            entry[1].cancel()
    if pool is not None:
        pool.shutdown(wait=may_join(pool), cancel_futures=True)


def may_join(pool: ThreadPoolExecutor) -> bool:
    """Whether this thread may wait for ``pool``'s workers to end: not when it is one of them, nor
    inside a garbage collection (which may have started within ``threading``'s own locks)."""
    if getattr(_gc_state, "collecting", False):
        return False
    # by ident: current_thread() would register a thread still in its bootstrap, under a lock
    return threading.get_ident() not in {thread.ident for thread in getattr(pool, "_threads", ())}


_gc_state = threading.local()


def _note_collection(phase: str, info: dict) -> None:
    """``gc.callbacks``: called in the collecting thread before and after each collection."""
    _gc_state.collecting = phase == "start"


gc.callbacks.append(_note_collection)
