#!/usr/bin/env bash
# Set up what Lakewarden needs on a Debian/Ubuntu machine; safe to run again.
#   scripts/setup.sh            system packages, services, database, virtualenv, migrations
#   scripts/setup.sh --test     the same plus Chromium for the browser tests, podman for tests/deploy
set -euo pipefail
cd "$(dirname "$0")/.."

WITH_TEST=0
[ "${1:-}" = "--test" ] && WITH_TEST=1
PY=${PYTHON:-python3}
VENV=.venv
# shellcheck source=scripts/lib_database.sh
. scripts/lib_database.sh
# The database the console will use: DATABASE_URL, or LAKEWARDEN_DB_NAME/_USER/_PASSWORD on
# 127.0.0.1:5432 (console/database_url.py); a URL set-up cannot use stops here with one line.
database_settings

APT_UPDATED=0
apt_install() {
  # Install Debian packages when root; otherwise name them and stop.
  if ! is_root; then
    echo "missing: $* — install with: sudo apt-get install -y $*" >&2
    exit 1
  fi
  if [ "$APT_UPDATED" = 0 ]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1; }

# --- system packages ---------------------------------------------------------------------------
if ! command -v java >/dev/null || [ "$(java_major)" -lt 17 ]; then
  if is_root && { [ "$APT_UPDATED" = 1 ] || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && APT_UPDATED=1; }; } \
      && apt-cache show openjdk-17-jre-headless >/dev/null 2>&1; then
    apt_install openjdk-17-jre-headless
  else
    apt_install openjdk-21-jre-headless  # newer Debian releases ship 21 only; Spark 4 runs on both
  fi
fi
command -v pg_ctlcluster >/dev/null || command -v pg_ctl >/dev/null || apt_install postgresql
command -v psql >/dev/null || apt_install postgresql-client
command -v redis-server >/dev/null || apt_install redis-server
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then apt_install python3-venv; fi
if [ "$WITH_TEST" = 1 ] && [ ! -x /usr/bin/chromium ]; then apt_install chromium; fi
# axe-core (npm) checks every console page in the browser tests (tests/e2e/test_browser_accessibility.py).
if [ "$WITH_TEST" = 1 ] && ! command -v npm >/dev/null; then apt_install npm; fi
# python-ldap (LDAP sign-in) has no wheel: pip builds it against OpenLDAP's and SASL's headers.
[ -f /usr/include/ldap.h ] || apt_install libldap-dev
[ -f /usr/include/sasl/sasl.h ] || apt_install libsasl2-dev
command -v gcc >/dev/null || apt_install gcc
# the compiled Iceberg manifest decoder (scripts/build_native.py) inflates with zlib
[ -f /usr/include/zlib.h ] || apt_install zlib1g-dev
# and with libdeflate when it can be had: a third faster on the one-record blocks pyiceberg writes
[ -f /usr/include/libdeflate.h ] || ! is_root || apt_install libdeflate-dev
"$PY" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || apt_install python3-dev
# The LDAP sign-in tests run a real OpenLDAP server of their own (slapd, with slapadd).
if [ "$WITH_TEST" = 1 ] && [ ! -x /usr/sbin/slapd ]; then apt_install slapd; fi
# The metrics test lets a real Prometheus scrape /metrics once (skipped without it).
if [ "$WITH_TEST" = 1 ] && ! command -v prometheus >/dev/null; then apt_install prometheus; fi
# The container tests (tests/deploy) build the image and run the compose quickstart with podman
# (runc; netavark, iptables and aardvark-dns give the compose network its names); debootstrap makes the
# Debian base where no registry answers.
if [ "$WITH_TEST" = 1 ] && { ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; } && is_root; then
  apt_install podman buildah runc debootstrap netavark aardvark-dns iptables fuse-overlayfs slirp4netns uidmap catatonit
fi

# axe-core, pinned, into the git-ignored tests/e2e/node_modules (installed again only when the pin
# changes); the browser walk skips without it.
AXE_VERSION=4.10.3
if [ "$WITH_TEST" = 1 ] && ! grep -qs "\"version\": \"$AXE_VERSION\"" tests/e2e/node_modules/axe-core/package.json; then
  say "installing axe-core $AXE_VERSION for the browser tests"
  npm install --prefix tests/e2e --no-save --no-package-lock --no-audit --no-fund --loglevel=error "axe-core@$AXE_VERSION" >/dev/null
fi

# --- services ----------------------------------------------------------------------------------
if [ "$DB_LOCAL" = 1 ] && ! pg_isready -q -h 127.0.0.1 -p "$DB_PORT"; then
  say "starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null; then
    for version in $(ls /etc/postgresql); do pg_ctlcluster --skip-systemctl-redirect "$version" main start || true; done
  fi
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p "$DB_PORT" && break; sleep 1; done
  pg_isready -q -h 127.0.0.1 -p "$DB_PORT" || { echo "PostgreSQL did not start on 127.0.0.1:$DB_PORT" >&2; exit 1; }
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "starting Redis"
  mkdir -p /tmp/lakewarden-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/lakewarden-redis --logfile /tmp/lakewarden-redis/redis.log
  for _ in $(seq 1 20); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.5; done
fi

# --- database role and database ----------------------------------------------------------------
# Those DATABASE_URL names: made here when the server is this machine's, else checked (one line
# saying what to run when they are missing).
database_ensure

# --- virtualenv --------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the virtualenv $VENV"
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.installed-$(cat requirements.txt pyproject.toml plugins/*/pyproject.toml plugins/*/requirements.txt 2>/dev/null | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  say "installing Python packages into $VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r requirements.txt
  "$VENV/bin/pip" install -q --no-deps -e .
  # The format plugins shipped beside Lakewarden (plugins/*): each its library, pinned exactly in
  # its requirements.txt, then the plugin itself, editable like the project (a change under
  # plugins/ needs no reinstall; a new entry point needs this script to run again).
  for plugin in plugins/*/; do
    if [ -f "$plugin/requirements.txt" ]; then
      "$VENV/bin/pip" install -q --no-deps -r "$plugin/requirements.txt"
    fi
    "$VENV/bin/pip" install -q --no-deps -e "$plugin"
  done
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
# The container tests' tools (tests/deploy/requirements.txt), outside requirements.txt: the image
# does not carry them.
DEPLOY_STAMP="$VENV/.deploy-$(sha256sum tests/deploy/requirements.txt | cut -c1-16)"
if [ "$WITH_TEST" = 1 ] && [ ! -f "$DEPLOY_STAMP" ]; then
  "$VENV/bin/pip" install -q -r tests/deploy/requirements.txt
  rm -f "$VENV"/.deploy-*
  touch "$DEPLOY_STAMP"
fi
"$VENV/bin/python" scripts/build_native.py || echo "the compiled manifest decoder did not build: Lakewarden uses the Python one" >&2
# A class-data archive for the local Spark driver's JVM (processes/spark/cds.py): each worker's
# driver then starts in about 4.6 s instead of 7.6 s. Trained once per JDK and PySpark (~30 s).
"$VENV/bin/python" -m processes.spark.cds || echo "Spark drivers start without a class-data archive" >&2

# --- secret key ----------------------------------------------------------------------------------
# Without SECRET_KEY in the environment every process (each gunicorn worker, Celery, manage.py)
# uses the one key in var/secret_key, made once here (mode 0600, never replaced).
KEY_FILE="${LAKEWARDEN_VAR_DIR:-var}/secret_key"
if [ -z "${SECRET_KEY:-}" ] && [ ! -s "$KEY_FILE" ]; then
  say "creating the secret key $KEY_FILE"
  "$VENV/bin/python" -c 'import sys; from pathlib import Path; from console.secret_key import persistent_secret_key; persistent_secret_key(Path(sys.argv[1]))' "$KEY_FILE"
fi

# --- schema --------------------------------------------------------------------------------------
# LAKEWARDEN_AUDIT_OWNER_ROLE (opt-in): the audit table and the public schema belong to that role,
# so the application's role cannot alter, truncate or drop the audit trail (scripts/audit_owner.sql).
# Pending migrations run with the table given back to the application's role, then it is taken again.
AUDIT_OWNER=${LAKEWARDEN_AUDIT_OWNER_ROLE:-}
"$VENV/bin/python" manage.py lakewarden_check
if [ -n "$AUDIT_OWNER" ] && ! "$VENV/bin/python" manage.py migrate --check >/dev/null 2>&1; then
  audit_owner "$DB_USER"
fi
"$VENV/bin/python" manage.py migrate --noinput -v 0
if [ -n "$AUDIT_OWNER" ]; then
  say "giving the audit trail to the role $AUDIT_OWNER"
  audit_owner "$AUDIT_OWNER"
fi
say "set-up done"
