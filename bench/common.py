"""Shared bits for benchmarks: the machine description and writing a section of RESULTS.md."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        memory = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, AttributeError):
        pass
    return f"{os.cpu_count()} cores ({cpu}){memory}, Python {platform.python_version()}, {platform.system()}"


def write_section(title: str, body: str) -> None:
    """Replace (or append) the ``## title`` section of bench/RESULTS.md. What the section held
    before (its run, the notes written under it by hand, its own earlier runs) is kept below the
    new run, under ``### Earlier run``: a record is never lost by measuring again."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nWritten by `make bench`.\n"
    stamp = f"_Run {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')} on {machine()}._\n\n"
    section = f"## {title}\n\n{stamp}{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", re.S | re.M)
    found = pattern.search(text)
    if found is None:
        RESULTS.write_text(text.rstrip() + "\n\n" + section)
        return
    earlier = found.group(1).strip()
    if earlier:
        section += f"\n### Earlier run\n\n{earlier}\n"
    RESULTS.write_text(text[: found.start()] + section + "\n" + text[found.end() :])


BENCH_DATABASE = os.environ.get(
    "LAKEWARDEN_BENCH_DATABASE_URL", "postgresql://lakewarden:lakewarden@127.0.0.1:5432/lakewarden_bench"
)


def django_on_bench_database() -> None:
    """Point Django at the benchmark database (created when missing), migrated, and set it up."""
    import sys

    import psycopg

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    name = BENCH_DATABASE.rsplit("/", 1)[1]
    with psycopg.connect(BENCH_DATABASE.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            conn.execute(f'create database "{name}"')
    os.environ["DATABASE_URL"] = BENCH_DATABASE
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def recreate_database(url: str, drop_only: bool = False) -> None:
    """Drop the database of ``url`` (a throwaway benchmark database) and create it again."""
    import psycopg

    server, name = url.rsplit("/", 1)
    with psycopg.connect(server + "/postgres", autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')
        if not drop_only:
            conn.execute(f'create database "{name}"')


def pointer_folder(location: Path, table_format: str) -> str:
    """A folder holding only what a pointer check lists (a Delta log's version names, an Iceberg
    ``metadata/`` file name) at ``location``; answers the pointer a refresh keeps for it."""
    if table_format == "delta":
        (location / "_delta_log").mkdir(parents=True)
        for version in range(4):
            (location / "_delta_log" / f"{version:020d}.json").touch()
        return "delta:3"
    (location / "metadata").mkdir(parents=True)
    (location / "metadata" / "00003-a.metadata.json").touch()
    return "iceberg:00003-a.metadata.json"
