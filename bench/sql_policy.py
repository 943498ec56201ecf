"""The workbench's SQL policy check (processes/sql_policy.py) on long queries: its time must grow
with the query's size, not its square, and stay within a small budget of a web worker up to the
API's cap (64 KiB, console/api/limits.py). Target: every shape checked in < 2 s of CPU at 64 KiB.

    .venv/bin/python bench/sql_policy.py              # 8, 16, 32 and 64 KiB of each shape
    .venv/bin/python bench/sql_policy.py --rounds 5

Issue 29, item 9: every function node was rendered with all of the tree below it; a chain of
``and 1=1`` (AND is a function node in sqlglot's tree) of 8 KB took 52 s (26 s on this machine),
16 KB reached gunicorn's worker timeout. Plain Python: no database, no Spark.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import write_section  # noqa: E402

TARGET_S = 2.0
SIZES_KIB = (8, 16, 32, 64)


def _repeat(head: str, term: str, size: int) -> str:
    return head + term * ((size - len(head)) // len(term))


SHAPES = {
    "where 1=1 and 1=1 ...": lambda size: _repeat("select * from t where 1=1", " and 1=1", size),
    "where a=1 or a=2 ...": lambda size: _repeat("select * from t where a=0", " or a=1", size),
    "where a rlike a rlike ...": lambda size: _repeat("select * from t where a", " rlike a", size),
    "select upper(lower(trim(c))), ...": lambda size: (
        _repeat("select 1", ", upper(lower(trim(c)))", size) + " from t"
    ),
    "where a + 1 + 1 ...": lambda size: _repeat("select * from t where a = 1", " + 1", size),
}


def _measure(sql: str, rounds: int) -> tuple[float, str]:
    from processes.sql_policy import SqlPolicyError, check_query

    times, outcome = [], ""
    for _ in range(rounds):
        started = time.process_time()  # CPU time: the machine is shared, wall time wanders
        try:
            check_query(sql)
            outcome = "accepted"
        except SqlPolicyError as error:
            outcome = f"refused: {error}"[:60]
        times.append(time.process_time() - started)
    return statistics.median(times), outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for shape, build in SHAPES.items():
        seconds = []
        for kib in SIZES_KIB:
            elapsed, outcome = _measure(build(kib * 1024), args.rounds)
            seconds.append(elapsed)
            print(f"{shape:36} {kib:3} KiB {elapsed:6.2f} s  {outcome}", flush=True)
        growth = seconds[-1] / seconds[0]
        verdict = "met" if seconds[-1] < TARGET_S else "missed"
        cells = " | ".join(f"{s:.2f}" for s in seconds)
        rows.append(
            f"| `{shape}` | {cells} | {growth:.1f}× | {outcome} | < {TARGET_S:.0f} s at 64 KiB: {verdict} |"
        )
    header = " | ".join(f"{kib} KiB s" for kib in SIZES_KIB)
    body = "\n".join(
        [
            f"CPU seconds of `check_query` on long queries, median of {args.rounds} rounds; 8× the size should cost",
            "about 8× the time (linear). Before (issue 29, item 9): 8 KB of `and 1=1` took 25.7 s on",
            "this machine (wall time; 52 s where it was found), 4 KB 5.6 s, 2 KB 1.4 s: quadratic.",
            "",
            f"| shape | {header} | 64 ÷ 8 KiB | outcome | target |",
            "|---|" + "---:|" * len(SIZES_KIB) + "---:|---|---|",
            *rows,
        ]
    )
    write_section("SQL policy check (bench/sql_policy.py)", body)


if __name__ == "__main__":
    main()
