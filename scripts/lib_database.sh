# shellcheck shell=bash
# Lakewarden's database for scripts/setup.sh (sourced; tests/architecture/test_setup_database.py
# runs these functions on throwaway databases). Needs the repository as the working directory.
#
#   database_settings   DB_NAME, DB_USER, DB_PASSWORD, DB_HOST, DB_PORT, DB_LOCAL, DB_URL and
#                       DB_SERVER_URL from DATABASE_URL or LAKEWARDEN_DB_* (console/database_url.py,
#                       the settings' own reading); one line and a failure when they cannot be used
#   database_ensure     the role (on this machine) and the database DATABASE_URL names, made when
#                       missing; elsewhere one line saying what to run when they are not there
#   audit_owner ROLE    scripts/audit_owner.sql as a superuser on that database

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
is_root() { [ "$(id -u)" = 0 ]; }

database_settings() {
  local assignments
  assignments=$("${PY:-python3}" console/database_url.py) || return 1
  eval "$assignments"
}

psql_admin() {
  # SQL on stdin, run as a Postgres superuser on the database postgres of this machine (arguments
  # go to psql: -d DB, -v name=value). Debian's fresh install trusts the postgres OS user on the
  # socket; developer machines often trust TCP on 127.0.0.1. Try both.
  if is_root && id postgres >/dev/null 2>&1 && su postgres -c "psql -p ${DB_PORT:-5432} -qtAc 'select 1'" >/dev/null 2>&1; then
    su postgres -s /bin/sh -c 'exec psql -v ON_ERROR_STOP=1 -qtA -d postgres "$@"' -- sh -p "${DB_PORT:-5432}" "$@"
  else
    psql -h 127.0.0.1 -p "${DB_PORT:-5432}" -U "${PGADMINUSER:-postgres}" -v ON_ERROR_STOP=1 -qtA -d postgres "$@"
  fi
}

database_ensure() {
  local where="${DB_HOST:-the local socket}:$DB_PORT"
  if [ "$DB_LOCAL" = 1 ] && {
    ! psql "$DB_SERVER_URL" -qtAc 'select 1' >/dev/null 2>&1 \
      || ! psql "$DB_SERVER_URL" -qtAc "select 1 from pg_roles where rolname = current_user and rolcreatedb" | grep -q 1
  }; then
    say "creating the database role $DB_USER"
    psql_admin -v user="$DB_USER" -v password="$DB_PASSWORD" >/dev/null <<'SQL'
SELECT format('CREATE ROLE %I LOGIN CREATEDB PASSWORD %L', :'user', :'password')
  WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I LOGIN CREATEDB PASSWORD %L', :'user', :'password')
  WHERE EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
SQL
  fi
  if ! psql "$DB_URL" -qtAc 'select 1' >/dev/null 2>&1; then
    say "creating the database $DB_NAME"
    if ! psql "$DB_SERVER_URL" -v ON_ERROR_STOP=1 -qtA -v name="$DB_NAME" >/dev/null 2>&1 <<'SQL'
SELECT format('CREATE DATABASE %I', :'name') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'name') \gexec
SQL
    then
      echo "set-up: cannot create the database $DB_NAME on $where as $DB_USER: as an admin there, run CREATE ROLE \"$DB_USER\" LOGIN PASSWORD '...'; CREATE DATABASE \"$DB_NAME\" OWNER \"$DB_USER\"; then run set-up again" >&2
      return 1
    fi
  fi
  if ! psql "$DB_URL" -qtAc 'select 1' >/dev/null 2>&1; then
    echo "set-up: the database $DB_NAME on $where does not let $DB_USER in: check DATABASE_URL's user and password and the server's pg_hba.conf" >&2
    return 1
  fi
}

audit_owner() {
  if [ "$DB_LOCAL" != 1 ]; then
    echo "set-up: LAKEWARDEN_AUDIT_OWNER_ROLE needs a superuser on $DB_HOST:$DB_PORT: there, run psql -v owner=$1 -v app_role=$DB_USER -d $DB_NAME -f scripts/audit_owner.sql (after manage.py migrate), and unset it for set-up" >&2
    return 1
  fi
  psql_admin -d "$DB_NAME" -v owner="$1" -v app_role="$DB_USER" <scripts/audit_owner.sql
}
