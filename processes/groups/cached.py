"""An answer that is slow to get (asking the workers, Spark's status API), shared through the cache
so the capacity page, the API and the alert tick ask at most every ``max_age`` seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.core.cache import cache


def shared_answer(key: str, max_age: float, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The cached answer under ``key`` when at most ``max_age`` seconds old, else ``compute()``
    with ``checked_at`` (epoch seconds) added, kept for the next callers. A cache that does not
    answer only costs the sharing."""
    now = time.time()
    try:
        cached = cache.get(key)
    except Exception:
        cached = None
    if cached is not None and 0 <= now - cached["checked_at"] <= max_age:
        return cached
    answer = {**compute(), "checked_at": now}
    try:
        cache.set(key, answer, timeout=int(max_age) + 1)
    except Exception:
        pass
    return answer
