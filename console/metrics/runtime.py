"""What the broker says: messages waiting per Celery queue, and worker and beat liveness as the
overview computes it (``console.overview.liveness``: a worker ping, beat's last tick).

The ping waits its whole timeout (0.8 s) for answers, so ``BrokerProbe`` runs it, and the queue
depths, in threads while the scrape's database queries run: a scrape takes about the longest of
them, not their sum.
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
        self.liveness: dict | None = None
        self.depths: dict[str, int] | None = None
        self._threads = [
            threading.Thread(target=self._read_liveness, name="metrics-liveness", daemon=True),
            threading.Thread(target=self._read_depths, name="metrics-queue-depths", daemon=True),
        ]

    def start(self) -> BrokerProbe:
        for thread in self._threads:
            thread.start()
        return self

    def _read_liveness(self) -> None:
        from console.overview import liveness

        try:
            self.liveness = liveness(ping_timeout=PING_SECONDS)
        except Exception as error:
            logger.warning("metrics: liveness could not be read: %s", error)
        finally:
            connections.close_all()  # this thread's own database connections

    def _read_depths(self) -> None:
        try:
            self.depths = queue_depths(celery_queues())
        except Exception as error:
            logger.warning("metrics: the broker did not answer: %s", error)

    def families(self) -> list[GaugeMetricFamily]:
        deadline = time.monotonic() + PROBE_SECONDS
        for thread in self._threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0))
        up = GaugeMetricFamily("lakewarden_broker_up", "1 when the broker answered this scrape's probe")
        up.add_metric([], 1 if self.depths is not None else 0)
        families = [up]
        if self.liveness is not None:
            families += _liveness_families(self.liveness)
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
