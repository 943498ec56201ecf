#!/usr/bin/env bash
# Set up what Lakewarden needs on a Debian/Ubuntu machine; safe to run again.
#   scripts/setup.sh            system packages, services, database, virtualenv, migrations
#   scripts/setup.sh --test     the same plus Chromium for the browser tests
set -euo pipefail
cd "$(dirname "$0")/.."

WITH_TEST=0
[ "${1:-}" = "--test" ] && WITH_TEST=1
PY=${PYTHON:-python3}
VENV=.venv
DB_NAME=${LAKEWARDEN_DB_NAME:-lakewarden}
DB_USER=${LAKEWARDEN_DB_USER:-lakewarden}
DB_PASSWORD=${LAKEWARDEN_DB_PASSWORD:-lakewarden}

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
is_root() { [ "$(id -u)" = 0 ]; }

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

# --- services ----------------------------------------------------------------------------------
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  say "starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null; then
    for version in $(ls /etc/postgresql); do pg_ctlcluster --skip-systemctl-redirect "$version" main start || true; done
  fi
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  pg_isready -q -h 127.0.0.1 -p 5432 || { echo "PostgreSQL did not start on 127.0.0.1:5432" >&2; exit 1; }
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "starting Redis"
  mkdir -p /tmp/lakewarden-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/lakewarden-redis --logfile /tmp/lakewarden-redis/redis.log
  for _ in $(seq 1 20); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.5; done
fi

# --- database role and database ----------------------------------------------------------------
psql_admin() {
  # SQL on stdin, run as a Postgres superuser on the database postgres (arguments go to psql:
  # -d DB, -v name=value). Debian's fresh install trusts the postgres OS user on the socket;
  # developer machines often trust TCP on 127.0.0.1. Try both.
  if is_root && id postgres >/dev/null 2>&1 && su postgres -c "psql -qtAc 'select 1'" >/dev/null 2>&1; then
    su postgres -s /bin/sh -c 'exec psql -v ON_ERROR_STOP=1 -qtA -d postgres "$@"' -- sh "$@"
  else
    psql -h 127.0.0.1 -U "${PGADMINUSER:-postgres}" -v ON_ERROR_STOP=1 -qtA -d postgres "$@"
  fi
}
if ! psql "postgresql://$DB_USER:$DB_PASSWORD@127.0.0.1:5432/postgres" -qtAc 'select 1' >/dev/null 2>&1 \
    || ! psql "postgresql://$DB_USER:$DB_PASSWORD@127.0.0.1:5432/postgres" -qtAc \
        "select 1 from pg_roles where rolname = current_user and rolcreatedb" | grep -q 1; then
  say "creating the database role $DB_USER"
  psql_admin <<SQL
do \$\$ begin
  if not exists (select from pg_roles where rolname = '$DB_USER') then
    create role $DB_USER login createdb password '$DB_PASSWORD';
  else
    alter role $DB_USER login createdb password '$DB_PASSWORD';
  end if;
end \$\$;
SQL
fi
if ! psql "postgresql://$DB_USER:$DB_PASSWORD@127.0.0.1:5432/postgres" -qtAc \
    "select 1 from pg_database where datname = '$DB_NAME'" | grep -q 1; then
  say "creating the database $DB_NAME"
  psql "postgresql://$DB_USER:$DB_PASSWORD@127.0.0.1:5432/postgres" -qc "create database $DB_NAME"
fi

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
  "$VENV/bin/python" -c 'import sys; from pathlib import Path; from console.settings_security import persistent_secret_key; persistent_secret_key(Path(sys.argv[1]))' "$KEY_FILE"
fi

# --- schema --------------------------------------------------------------------------------------
# LAKEWARDEN_AUDIT_OWNER_ROLE (opt-in): the audit table and the public schema belong to that role,
# so the application's role cannot alter, truncate or drop the audit trail (scripts/audit_owner.sql).
# Pending migrations run with the table given back to the application's role, then it is taken again.
AUDIT_OWNER=${LAKEWARDEN_AUDIT_OWNER_ROLE:-}
audit_owner() { psql_admin -d "$DB_NAME" -v owner="$1" -v app_role="$DB_USER" <scripts/audit_owner.sql; }
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
