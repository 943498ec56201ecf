"""What the broker says: messages waiting per Celery queue, and worker and beat liveness as the
overview computes it (a worker ping; beat's last tick, ``processes.health.beat_liveness``).

The queue depths are read in a thread while the scrape's database queries run. A worker ping
waits its whole timeout and, on Redis, whole seconds (BRPOP): about 1.1 s. So a scrape answers with
this process's last ping when it is younger than ``WORKERS_MAX_AGE`` (``lakewarden_workers_ping_age_seconds``
says how old) while the ping it starts finishes for the next scrape; only a process with no recent
ping waits for one. Beat's liveness is read from its row on every scrape.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import connections
from prometheus_client.core import GaugeMetricFamily

logger = logging.getLogger(__name__)

#: The longest a scrape waits for the probes (a broker that is down); what is late is left out.
PROBE_SECONDS = 3.0
#: A worker answers a ping within milliseconds; the overview waits 0.8 s, a scrape less.
PING_SECONDS = 0.5
#: A scrape reports this process's last worker ping when it is at most this old (seconds).
WORKERS_MAX_AGE = 60.0
#: (monotonic time, check_workers answer) of this process's last finished ping.
_last_ping: tuple[float, dict] | None = None


def celery_queues() -> list[str]:
    """The queues Lakewarden's tasks go to: the light (default) queue and the heavy one."""
    return list(dict.fromkeys([settings.CELERY_TASK_DEFAULT_QUEUE, settings.LAKEWARDEN_HEAVY_QUEUE]))


def queue_depths(queues: list[str]) -> dict[str, int]:
    """Messages waiting in each queue, asked of the broker in use: the Redis lists (every priority
    list of a queue) or RabbitMQ's passive declare. A queue the broker does not know yet is empty."""
    from console.celery import app

    depths = {}
    with app.connection_for_read(url=settings.CELERY_BROKER_URL) as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        for queue in queues:
            channel = conn.channel()
            try:
                depths[queue] = channel.queue_declare(queue=queue, passive=True).message_count
            except conn.channel_errors:
                depths[queue] = 0  # never declared: nothing was ever sent to it
            finally:
                try:
                    channel.close()
                except Exception:  # a channel the broker closed after a NOT_FOUND
                    logger.debug("closing the channel of queue %s failed", queue, exc_info=True)
    return depths


class BrokerProbe:
    """Liveness and queue depths, each fetched in its own thread: ``start()``, then ``families()``."""

    def __init__(self) -> None:
        self.workers: dict | None = None
        self.depths: dict[str, int] | None = None
        self._ping = threading.Thread(target=self._read_workers, name="metrics-worker-ping", daemon=True)
        self._threads = [
            self._ping,
            threading.Thread(target=self._read_depths, name="metrics-queue-depths", daemon=True),
        ]

    def start(self) -> BrokerProbe:
        for thread in self._threads:
            thread.start()
        return self

    def _read_workers(self) -> None:
        global _last_ping
        from processes.health import check_workers

        try:
            self.workers = check_workers(timeout=PING_SECONDS)
            _last_ping = (time.monotonic(), self.workers)
        except Exception as error:
            logger.warning("metrics: the workers could not be pinged: %s", error)
        finally:
            connections.close_all()  # this thread's own database connections, if any

    def _read_depths(self) -> None:
        try:
            self.depths = queue_depths(celery_queues())
        except Exception as error:
            logger.warning("metrics: the broker did not answer: %s", error)

    def families(self) -> list[GaugeMetricFamily]:
        from processes.health import beat_liveness

        deadline = time.monotonic() + PROBE_SECONDS
        last = _last_ping
        recent = last is not None and time.monotonic() - last[0] <= WORKERS_MAX_AGE
        for thread in self._threads:
            wait = 0.0 if thread is self._ping and recent else max(deadline - time.monotonic(), 0)
            thread.join(timeout=wait)
        families = self._broker_families()
        if self.workers is not None:
            answered_at, workers = time.monotonic(), self.workers
        elif recent and last is not None:
            answered_at, workers = last
        else:
            return families
        age = GaugeMetricFamily(
            "lakewarden_workers_ping_age_seconds", "Age of the worker ping the worker gauges report"
        )
        age.add_metric([], max(time.monotonic() - answered_at, 0.0))
        return [*families, age, *_liveness_families({"workers": workers, **beat_liveness()})]

    def _broker_families(self) -> list[GaugeMetricFamily]:
        up = GaugeMetricFamily("lakewarden_broker_up", "1 when the broker answered this scrape's probe")
        up.add_metric([], 1 if self.depths is not None else 0)
        families = [up]
        if self.depths is not None:
            depth = GaugeMetricFamily(
                "lakewarden_celery_queue_length", "Messages waiting in the Celery queue", labels=["queue"]
            )
            for queue, count in self.depths.items():
                depth.add_metric([queue], count)
            families.append(depth)
        return families


def _liveness_families(liveness: dict) -> list[GaugeMetricFamily]:
    workers = liveness["workers"].get("workers", [])
    answering = GaugeMetricFamily("lakewarden_workers_up", "Celery workers answering a ping")
    answering.add_metric([], len(workers))
    worker = GaugeMetricFamily(
        "lakewarden_worker_up", "1 for each Celery worker answering", labels=["worker"]
    )
    for name in workers:
        worker.add_metric([name], 1)
    beat_up = GaugeMetricFamily("lakewarden_beat_up", "1 when beat ticked recently (as the overview judges)")
    beat_up.add_metric([], 1 if liveness["beat_alive"] else 0)
    families = [answering, worker, beat_up]
    beat = liveness["beat"]
    if beat is not None:
        seen = GaugeMetricFamily(
            "lakewarden_beat_last_seen_timestamp_seconds", "Unix time of beat's last tick"
        )
        seen.add_metric([], beat.last_seen.timestamp())
        families.append(seen)
    return families
