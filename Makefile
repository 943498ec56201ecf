# Lakewarden: `make demo` sets up everything and starts the console; `make test` runs the suite.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test setup setup-test serve bench lint format clean image

# LAKEWARDEN_DEMO_STORAGE=s3 make demo: the demo lakehouse on a SeaweedFS under var/seaweedfs, which
# lakewarden_serve then runs as one of its children; its prefixes (the REST catalog's tables under
# s3://lakehouse/demo too: registration refuses a table outside the roots) join the allowed roots.
ifeq ($(LAKEWARDEN_DEMO_STORAGE),s3)
export LAKEWARDEN_ALLOWED_ROOTS ?= $(or $(LAKEWARDEN_WAREHOUSE),$(or $(LAKEWARDEN_VAR_DIR),var)/warehouse):s3://lake/demo:s3://lakehouse/demo:s3://results/cache
endif

demo: setup
	$(PY) manage.py lakewarden_plugins
	$(PY) manage.py lakewarden_admin
	$(PY) manage.py lakewarden_demo
	$(PY) manage.py lakewarden_serve

# scripts/run_tests.sh: the tests outside tests/e2e on PYTEST_WORKERS pytest-xdist workers (default
# 2; tests/xdist_worker.py says what each keeps to itself), then tests/e2e in one process, each
# Celery/Spark/browser test with the whole machine. PYTEST_ARGS runs just those (one process unless
# PYTEST_WORKERS says otherwise). Request-latency samples go to a throwaway folder. setup builds the
# compiled manifest decoder; LAKEWARDEN_REQUIRE_NATIVE=1 fails its tests, instead of skipping them,
# when it did not build.
test: setup-test
	PY=$(PY) PYTEST_WORKERS=$(PYTEST_WORKERS) PYTEST_ARGS='$(PYTEST_ARGS)' bash scripts/run_tests.sh

# The container image (Dockerfile) as lakewarden:latest (IMAGE=name:tag for another): wheels built on
# this machine first (deploy/wheelhouse, reused), the Debian base made with debootstrap where no
# registry answers; podman, else docker. docs/operating/deployment.md runs it.
IMAGE ?= lakewarden:latest
image:
	deploy/build-image.sh $(IMAGE)

setup:
	scripts/setup.sh

setup-test:
	scripts/setup.sh --test

serve: setup
	$(PY) manage.py lakewarden_serve

# bench/requirements.txt: benchmark-only packages of .venv (bench/listing.py makes its own
# virtualenv for the native planners it compares with, see bench/requirements-anchors.txt).
bench: setup
	$(VENV)/bin/pip install -q -r bench/requirements.txt -c requirements.txt
	$(PY) bench/run.py

# mypy checks storage and processes: pyproject.toml's [tool.mypy] names the files.
lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python scripts/check_sizes.py

format:
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf var/ .pytest_cache
