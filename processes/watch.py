"""One watched run: a thread beside long work that, every interval, records liveness (optional),
notices a cancel request and interrupts the work's Spark jobs. Processes (heartbeat, progress) and
queries (cancel only) both run under one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import connection

logger = logging.getLogger(__name__)


class Watch(threading.Thread):
    """``cancel_requested()`` is polled every ``interval`` seconds after ``beat()`` (if given);
    once it answers True, ``cancelled`` is set and ``interrupt()`` is called on that tick and every
    tick after it: a Spark job submitted after an interrupt (the cancel came while the work was
    still planning) is interrupted at the next tick. The thread's database connection is closed
    when it stops."""

    def __init__(
        self,
        *,
        name: str,
        interval: float,
        cancel_requested: Callable[[], bool],
        interrupt: Callable[[], None],
        beat: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(daemon=True, name=name)
        self.interval = interval
        self.cancelled = threading.Event()
        self._cancel_requested = cancel_requested
        self._interrupt = interrupt
        self._beat = beat
        self._stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopped.wait(self.interval):
                self.tick()
        finally:
            connection.close()

    def tick(self) -> None:
        try:
            if self._beat is not None:
                self._beat()
            if not self.cancelled.is_set() and self._cancel_requested():
                self.cancelled.set()
        except Exception:
            logger.warning("%s: the watch could not reach the database", self.name, exc_info=True)
            # A restarted database broke this thread's connection; Django reconnects only once
            # it is closed, so the next tick (heartbeat, cancel) gets a new one.
            connection.close()
            return
        if self.cancelled.is_set():
            try:
                self._interrupt()
            except Exception:
                logger.warning("%s: could not interrupt the Spark jobs", self.name, exc_info=True)

    def stop(self) -> None:
        self._stopped.set()
