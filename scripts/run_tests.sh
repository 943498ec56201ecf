#!/usr/bin/env bash
# The whole suite as `make test` runs it, in two phases:
#
#   1. every test outside tests/e2e on PYTEST_WORKERS pytest-xdist workers (default 2): unit and
#      integration tests share nothing a worker does not keep to itself (tests/xdist_worker.py);
#   2. tests/e2e in one process, after phase 1: Celery workers, beat, Spark clusters, served
#      stacks and browsers, each with the whole machine, as on a loaded 2-core CI machine they
#      need it (two at once would each wait on the other's JVMs).
#
# PYTEST_ARGS given (a file, -k, ...): one run of just that, in one process unless PYTEST_WORKERS
# says otherwise. Exit status: the first phase's failure, else the second's.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
export LAKEWARDEN_REQUIRE_NATIVE=1
samples=$(mktemp -d)
export PROMETHEUS_MULTIPROC_DIR=$samples
trap 'rm -rf "$samples"' EXIT

if [[ -n "${PYTEST_ARGS:-}" ]]; then
    # shellcheck disable=SC2086 # PYTEST_ARGS is a list of words on purpose
    exec "$PY" -m pytest -n "${PYTEST_WORKERS:-0}" --dist loadgroup $PYTEST_ARGS
fi

workers=${PYTEST_WORKERS:-2}
started=$SECONDS
"$PY" -m pytest -n "$workers" --dist loadgroup --ignore=tests/e2e
first=$?
echo "==> phase 1 (outside tests/e2e, $workers workers): exit $first in $((SECONDS - started)) s"
started=$SECONDS
"$PY" -m pytest -n 0 tests/e2e
second=$?
echo "==> phase 2 (tests/e2e, one process): exit $second in $((SECONDS - started)) s"
if [[ $first -ne 0 ]]; then
    exit "$first"
fi
exit "$second"
