#!/usr/bin/env bash
# A throwaway PgBouncer in transaction pooling mode in front of a PostgreSQL server, for tests and CI.
#
#   scripts/pgbouncer.sh start DIR [PORT] [UPSTREAM_HOST] [UPSTREAM_PORT] [USER]
#   scripts/pgbouncer.sh stop DIR
#
# Every database of the upstream server is reachable through it (a `*` entry: the tests' databases
# are created per test), as USER (default postgres) with no password (auth_type trust; the
# upstream must trust that login from here too). DIR holds the configuration, log and pid file.
# PgBouncer refuses to run as root: as root it runs as the user `postgres` (else `nobody`).
# Exit status 3: no pgbouncer binary here (callers skip, see .ci/run).
set -euo pipefail

usage() { echo "usage: $0 start DIR [PORT] [UPSTREAM_HOST] [UPSTREAM_PORT] [USER] | stop DIR" >&2; exit 2; }

find_pgbouncer() {
  command -v pgbouncer 2>/dev/null && return 0
  [ -x /usr/sbin/pgbouncer ] && { echo /usr/sbin/pgbouncer; return 0; }
  return 1
}

start() {
  local dir="$1" port="${2:-6432}" host="${3:-127.0.0.1}" upstream_port="${4:-5432}" user="${5:-postgres}"
  local binary
  binary="$(find_pgbouncer)" || { echo "pgbouncer: not installed" >&2; exit 3; }
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$upstream_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = $user
max_client_conn = 900
default_pool_size = 20
; a test database is dropped WITH (FORCE) after its test: forget its pool soon after
autodb_idle_timeout = 30
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  printf '"%s" ""\n' "$user" >"$dir/userlist.txt"
  local run=()
  if [ "$(id -u)" = 0 ]; then
    local as=postgres
    id "$as" >/dev/null 2>&1 || as=nobody
    chown -R "$as" "$dir"
    run=(runuser -u "$as" --)
  fi
  "${run[@]}" "$binary" -d "$dir/pgbouncer.ini"
  # Ready when it accepts connections (it daemonizes before it listens).
  local deadline=$((SECONDS + 15))
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "pgbouncer did not listen on 127.0.0.1:$port within 15s:" >&2
      cat "$dir/pgbouncer.log" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
  echo "pgbouncer: transaction pooling on 127.0.0.1:$port in front of $host:$upstream_port (config in $dir)"
}

stop() {
  local dir="$1" pid
  [ -f "$dir/pgbouncer.pid" ] || return 0
  pid="$(cat "$dir/pgbouncer.pid")"
  kill -TERM "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
}

case "${1:-}" in
  start) [ $# -ge 2 ] || usage; shift; start "$@" ;;
  stop) [ $# -eq 2 ] || usage; stop "$2" ;;
  *) usage ;;
esac
