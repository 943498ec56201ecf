"""Run every benchmark under bench/ (each writes its own section of bench/RESULTS.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def main() -> int:
    scripts = sorted(
        p
        for p in BENCH_DIR.glob("*.py")
        if p.name not in {"run.py", "common.py"} and not p.name.startswith("_")
    )
    if not scripts:
        print("no benchmarks yet")
        return 0
    failed = []
    for script in scripts:
        print(f"=== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=BENCH_DIR.parent).returncode != 0:
            failed.append(script.name)
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    print(f"results in {BENCH_DIR / 'RESULTS.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
