#!/usr/bin/env bash
# The whole suite as `make test` runs it:
#
#   1. every test outside tests/e2e on PYTEST_WORKERS pytest-xdist workers (default 2): unit and
#      integration tests share nothing a worker does not keep to itself (tests/xdist_worker.py);
#   2. beside it, started at the same time, the end-to-end tests that wait on a browser or a
#      served stack (E2E_BESIDE: the browser walks, gunicorn, a worker's refresh and liveness):
#      they spend their time waiting for pages and processes, about one core's load, so on a
#      2-core machine they fit beside the first run instead of after it. They have their own test
#      database (test_lakewarden_e2e), Redis database (13), metrics folder and cache keys, and they
#      wait for conditions; on 2026-12-02 they all passed beside the first run at a load average
#      of 30.
#      Since the reapers wait for a lost worker rather than a late heartbeat (processes/workers.py),
#      the killed-worker tests of processes and the prefetch test run beside too: they passed
#      twice at a load average of 6-14 on 2026-12-02;
#   3. after both, the rest of tests/e2e in one process with the whole machine: Spark clusters
#      (a Spark Connect server's query went over its 120 s at a load average of 12-16),
#      beat-driven maintenance, query faults, the object store.
#
# The side run's output is kept in a file and printed when the first run ends, so the two do not
# interleave. E2E_AFTER=1 runs all of tests/e2e after the first run, in one process.
#
# PYTEST_ARGS given (a file, -k, ...): one run of just that, in one process unless PYTEST_WORKERS
# says otherwise. Exit status: the first run's failure, else the side run's, else the last's.
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
beside=(tests/e2e/test_browser.py tests/e2e/test_browser_accessibility.py
    tests/e2e/test_browser_table_tabs.py tests/e2e/test_browser_teams.py tests/e2e/test_served_stack.py
    tests/e2e/test_celery_worker.py tests/e2e/test_fresh_figures_e2e.py tests/e2e/test_processes_e2e.py
    tests/e2e/test_worker_prefetch_e2e.py)
if [[ -n "${E2E_AFTER:-}" ]]; then
    beside=()
fi
after=()
for file in tests/e2e/test_*.py; do
    [[ " ${beside[*]} " == *" $file "* ]] || after+=("$file")
done
side_log=$(mktemp)
trap 'rm -rf "$samples" "$side_log"' EXIT
mkdir -p "$samples/e2e"
e2e() {
    LAKEWARDEN_TEST_DATABASE=${E2E_DATABASE:-test_lakewarden_e2e} \
        LAKEWARDEN_TEST_BROKER_URL=${E2E_BROKER_URL:-redis://127.0.0.1:6379/13} \
        PROMETHEUS_MULTIPROC_DIR=$samples/e2e \
        "$PY" -m pytest -n 0 "$@"
}
started=$SECONDS
side=0
if [[ ${#beside[@]} -gt 0 ]]; then
    e2e "${beside[@]}" >"$side_log" 2>&1 &
    side_pid=$!
fi
"$PY" -m pytest -n "$workers" --dist loadgroup --ignore=tests/e2e
first=$?
echo "==> outside tests/e2e ($workers workers): exit $first in $((SECONDS - started)) s"
if [[ ${#beside[@]} -gt 0 ]]; then
    wait "$side_pid"
    side=$?
    echo "==> beside them, ${beside[*]}:"
    cat "$side_log"
    echo "==> exit $side; both done at $((SECONDS - started)) s"
fi
e2e "${after[@]}"
last=$?
echo "==> the rest of tests/e2e (one process, after): exit $last at $((SECONDS - started)) s"
for status in "$first" "$side" "$last"; do
    if [[ $status -ne 0 ]]; then
        exit "$status"
    fi
done
exit 0
