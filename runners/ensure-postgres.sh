#!/usr/bin/env bash
# Makes sure a PostgreSQL test cluster answers on this machine and prints its URL (the only
# thing written to stdout):  export INFRADEV_TEST_PG_URL=$(runners/ensure-postgres.sh)
#
# Installs Debian's postgresql when the server binaries are missing, creates a cluster in
# ${INFRADEV_PG_DIR:-/tmp/infradev-pg} owned by the `postgres` user, starts it by hand (there is
# no systemd here) on 127.0.0.1:${INFRADEV_PG_PORT:-55432} with fsync off (a throwaway test
# cluster), and creates the role and database `infradev` (password `infradev`, CREATEDB: each
# test creates and drops its own database). Idempotent: an answering cluster is left as it is.
set -euo pipefail

dir=${INFRADEV_PG_DIR:-/tmp/infradev-pg}
port=${INFRADEV_PG_PORT:-55432}
url="postgres://infradev:infradev@127.0.0.1:${port}/infradev"
log="${dir}.log"

say() { echo "ensure-postgres: $*" >&2; }

bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]]; then
    echo "$d"
  fi
}

bin=$(bindir)
if [[ -z "$bin" ]]; then
  if [[ $EUID -ne 0 ]]; then
    say "PostgreSQL server binaries are missing and installing them needs root"
    exit 1
  fi
  say "installing postgresql from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  bin=$(bindir)
  [[ -n "$bin" ]] || { say "postgresql installed but no server binaries under /usr/lib/postgresql"; exit 1; }
fi

# The server refuses to run as root: as root, run it as `postgres`; otherwise as ourselves.
if [[ $EUID -eq 0 ]]; then
  if ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
  as_pg() { runuser -u postgres -- "$@"; }
  owner=postgres
else
  as_pg() { "$@"; }
  owner=$(id -un)
fi

# Local administration goes through the Unix socket in the cluster directory (trust auth).
psql_admin() { as_pg "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres "$@"; }

ready() { "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -t 2 >/dev/null 2>&1; }

provision() {
  psql_admin -tA <<'SQL' >/dev/null
SELECT 'CREATE ROLE infradev LOGIN CREATEDB PASSWORD ''infradev'''
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'infradev') \gexec
SELECT 'CREATE DATABASE infradev OWNER infradev'
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'infradev') \gexec
SQL
}

if ready; then
  # Something answers on the port. If it is our cluster, make sure the role and database
  # exist; if it is someone else's, leave it alone and hope the URL works.
  if [[ -S "$dir/.s.PGSQL.$port" ]]; then
    provision
  fi
  echo "$url"
  exit 0
fi

if [[ ! -f "$dir/PG_VERSION" ]]; then
  say "creating a test cluster in $dir"
  rm -rf "$dir"
  install -d -m 0700 -o "$owner" "$dir"
  pwfile=$(mktemp)
  echo postgres >"$pwfile"
  chown "$owner" "$pwfile"
  as_pg "$bin/initdb" -D "$dir" -U postgres --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >"$log" 2>&1 || { rm -f "$pwfile"; say "initdb failed; see $log"; cat "$log" >&2; exit 1; }
  rm -f "$pwfile"
fi

say "starting PostgreSQL on 127.0.0.1:$port (log: $log)"
touch "$log"
chown "$owner" "$log"
as_pg "$bin/pg_ctl" -D "$dir" -l "$log" -w -t 60 start \
  -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c fsync=off \
      -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" >/dev/null ||
  { say "PostgreSQL did not start; see $log"; tail -n 30 "$log" >&2; exit 1; }

for _ in $(seq 60); do
  ready && break
  sleep 1
done
ready || { say "PostgreSQL does not answer on 127.0.0.1:$port; see $log"; exit 1; }

provision
echo "$url"
