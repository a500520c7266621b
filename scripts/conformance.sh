#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, server scenarios) against
# `catalog serve --demo` and compares the outcome with scripts/conformance-expected-failures.txt.
#
#   scripts/conformance.sh                      install if needed, start the server, run both suites
#   scripts/conformance.sh -s resources-list    only these scenarios (repeatable; in every suite that has them)
#   scripts/conformance.sh --install-only       just fill the cache (Node 22 + both suite versions)
#   scripts/conformance.sh --list               print the server scenarios of each suite version
#   scripts/conformance.sh --keep               keep the work dir (results, server log) even on success
#
# Suites: 0.1.16 (protocol 2025-11-25: initialize handshake, sessions) and 0.2.0-alpha.12 run with
# --spec-version 2026-07-28 (stateless, per-request _meta). `--suite all` is used so pending scenarios run too.
#
# Environment:
#   CATALOG_CONFORMANCE_CACHE       cache dir (default $HOME/.cache/catalog-conformance): node22/, suite-<version>/
#   CATALOG_CONFORMANCE_SERVER_CMD  server command (default "catalog serve --demo"). "--host 127.0.0.1 --port PORT"
#                                   is appended, unless the command contains {port} (and maybe {host}) itself.
#                                   It runs with a fresh temporary CATALOG_HOME; CATALOG_DATABASE_URL,
#                                   CATALOG_ALLOWED_HOSTS and CATALOG_ALLOWED_ORIGINS are unset for it.
#   CATALOG_CONFORMANCE_URL         test an already running server at this MCP URL (no server is started)
#   CATALOG_CONFORMANCE_VERSIONS    suite versions to run (default "0.1.16 0.2.0-alpha.12")
#   CATALOG_CONFORMANCE_EXPECTED    expected-failures file (default scripts/conformance-expected-failures.txt)
#   CATALOG_CONFORMANCE_OUT         results dir (default: <work dir>/results; kept when set)
#   CATALOG_CONFORMANCE_STARTUP_TIMEOUT  seconds to wait for /healthz (and /readyz if served) (default 180)
#   CATALOG_CONFORMANCE_SUITE_TIMEOUT    seconds one suite run may take (default 1200)
#   CATALOG_CONFORMANCE_FAIL_ON_WARNING=1  count WARNING checks as failures (SHOULD-level checks)
#
# Exit status: 0 when every failure is listed as expected and every listed entry still fails;
# 1 on an unexpected failure or a stale entry (a listed failure that now passes); 2 on setup errors.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CATALOG_CONFORMANCE_CACHE:-$HOME/.cache/catalog-conformance}"
NODE_MAJOR=22
read -r -a VERSIONS <<<"${CATALOG_CONFORMANCE_VERSIONS:-0.1.16 0.2.0-alpha.12}"
EXPECTED="${CATALOG_CONFORMANCE_EXPECTED:-$SCRIPT_DIR/conformance-expected-failures.txt}"
STARTUP_TIMEOUT="${CATALOG_CONFORMANCE_STARTUP_TIMEOUT:-180}"
SUITE_TIMEOUT="${CATALOG_CONFORMANCE_SUITE_TIMEOUT:-1200}"
HOST=127.0.0.1

MODE=run
KEEP=0
SCENARIOS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -s | --scenario) SCENARIOS+=("${2:?--scenario needs a name}"); shift 2 ;;
    --install-only) MODE=install; shift ;;
    --list) MODE=list; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "conformance.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf '[conformance] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 2; }

# Which protocol revision each suite version is run at.
spec_version_for() {
  case "$1" in
    0.1.*) echo 2025-11-25 ;;
    *) echo 2026-07-28 ;;
  esac
}

NODE_DIR="$CACHE/node$NODE_MAJOR"
NODE="$NODE_DIR/node_modules/node/bin/node"
suite_dir() { echo "$CACHE/suite-$1"; }
suite_cli() { echo "$(suite_dir "$1")/node_modules/@modelcontextprotocol/conformance/dist/index.js"; }

node_ok() { [[ -x "$NODE" ]] && [[ "$("$NODE" --version 2>/dev/null)" == "v$NODE_MAJOR."* ]]; }
suite_ok() {
  local pkg
  pkg="$(suite_dir "$1")/node_modules/@modelcontextprotocol/conformance/package.json"
  [[ -f "$pkg" && -f "$(suite_cli "$1")" ]] && grep -q "\"version\": \"$1\"" "$pkg"
}

# npm install into a fresh prefix, then move it into place (an interrupted install leaves nothing half-done).
npm_install_into() {
  local dest="$1" spec="$2" tmp
  tmp="$dest.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  say "installing $spec into $dest"
  if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "$spec" >"$tmp.log" 2>&1; then
    cat "$tmp.log" >&2
    rm -rf "$tmp" "$tmp.log"
    die "npm install $spec failed"
  fi
  rm -rf "$dest" "$tmp.log"
  mv "$tmp" "$dest"
}

install_all() {
  local need=0 v
  node_ok || need=1
  for v in "${VERSIONS[@]}"; do suite_ok "$v" || need=1; done
  [[ $need -eq 0 ]] && return 0
  command -v npm >/dev/null || die "npm is needed to install Node $NODE_MAJOR and the conformance suite"
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.install.lock"
  flock 9
  node_ok || npm_install_into "$NODE_DIR" "node@$NODE_MAJOR"
  node_ok || die "node@$NODE_MAJOR did not install a working $NODE"
  for v in "${VERSIONS[@]}"; do
    suite_ok "$v" || npm_install_into "$(suite_dir "$v")" "@modelcontextprotocol/conformance@$v"
    suite_ok "$v" || die "@modelcontextprotocol/conformance@$v did not install"
  done
  flock -u 9
  exec 9>&-
}

conformance() { # VERSION ARGS...
  local v="$1"
  shift
  PATH="$NODE_DIR/node_modules/.bin:$PATH" "$NODE" "$(suite_cli "$v")" "$@"
}

# The server scenarios a suite runs at its protocol revision, one a line.
list_scenarios() {
  conformance "$1" list --server --spec-version "$(spec_version_for "$1")" | sed -n 's/^  - \([^ ]*\).*/\1/p'
}

install_all
if [[ $MODE == install ]]; then
  say "cache ready: $CACHE (node $("$NODE" --version); suites ${VERSIONS[*]})"
  exit 0
fi
if [[ $MODE == list ]]; then
  for v in "${VERSIONS[@]}"; do
    echo "# $v (--spec-version $(spec_version_for "$v"))"
    list_scenarios "$v"
  done
  exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/catalog-conformance.XXXXXX")"
OUT="${CATALOG_CONFORMANCE_OUT:-$WORK/results}"
[[ -n "${CATALOG_CONFORMANCE_OUT:-}" ]] && KEEP=1
mkdir -p "$OUT"
SERVER_PID=""
STATUS=2

stop_server() {
  [[ -n "$SERVER_PID" ]] || return 0
  local pid="$SERVER_PID" i
  SERVER_PID=""
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  # The server runs in its own process group (setsid): end whatever it left behind, e.g. a PostgreSQL.
  if kill -0 -- "-$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_server
  if [[ $KEEP -eq 0 && $STATUS -eq 0 ]]; then
    rm -rf "$WORK"
  else
    say "results and logs kept in $WORK${CATALOG_CONFORMANCE_OUT:+ (results in $OUT)}"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  "$NODE" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});'
}

http_status() { # URL -> HTTP status code, 000 when nothing answers
  curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$1" 2>/dev/null || true
}

start_server() {
  local port cmd log="$WORK/server.log" deadline code
  port="$(free_port)"
  cmd="${CATALOG_CONFORMANCE_SERVER_CMD:-catalog serve --demo}"
  if [[ "$cmd" == *"{port}"* ]]; then
    cmd="${cmd//\{port\}/$port}"
    cmd="${cmd//\{host\}/$HOST}"
  else
    cmd="$cmd --host $HOST --port $port"
  fi
  if [[ -z "${CATALOG_CONFORMANCE_SERVER_CMD:-}" ]] && ! command -v catalog >/dev/null; then
    die "'catalog' is not on PATH: run 'pip install -e .' first, or set CATALOG_CONFORMANCE_SERVER_CMD"
  fi
  mkdir -p "$WORK/catalog-home"
  say "starting: $cmd  (CATALOG_HOME=$WORK/catalog-home, log $log)"
  env -u CATALOG_DATABASE_URL -u CATALOG_ALLOWED_HOSTS -u CATALOG_ALLOWED_ORIGINS \
    CATALOG_HOME="$WORK/catalog-home" \
    setsid bash -c "exec $cmd" </dev/null >"$log" 2>&1 &
  SERVER_PID=$!
  URL="http://$HOST:$port/mcp"
  deadline=$((SECONDS + STARTUP_TIMEOUT))
  until [[ "$(http_status "http://$HOST:$port/healthz")" == 200 ]]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      tail -n 40 "$log" >&2 || true
      die "the server exited before answering /healthz"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 40 "$log" >&2 || true
      die "no 200 from http://$HOST:$port/healthz within ${STARTUP_TIMEOUT}s"
    fi
    sleep 0.5
  done
  # /readyz (database, schema, event listener) when the server has it; a 404 means it does not.
  while code="$(http_status "http://$HOST:$port/readyz")"; [[ "$code" != 200 && "$code" != 404 ]]; do
    if ((SECONDS >= deadline)); then
      tail -n 40 "$log" >&2 || true
      die "/readyz still answers $code after ${STARTUP_TIMEOUT}s"
    fi
    sleep 0.5
  done
  say "server up at $URL (pid $SERVER_PID, ${SECONDS}s since start of script)"
}

if [[ -n "${CATALOG_CONFORMANCE_URL:-}" ]]; then
  URL="$CATALOG_CONFORMANCE_URL"
  say "testing the running server at $URL"
else
  command -v curl >/dev/null || die "curl is needed to wait for /healthz"
  start_server
fi

for v in "${VERSIONS[@]}"; do
  spec="$(spec_version_for "$v")"
  vout="$OUT/$v"
  mkdir -p "$vout"
  list_scenarios "$v" >"$vout/scenarios.txt"
  [[ -s "$vout/scenarios.txt" ]] || die "suite $v listed no server scenarios"
  started=$SECONDS
  if [[ ${#SCENARIOS[@]} -gt 0 ]]; then
    n=0
    for s in "${SCENARIOS[@]}"; do
      grep -qxF -- "$s" "$vout/scenarios.txt" || continue
      n=$((n + 1))
      PATH="$NODE_DIR/node_modules/.bin:$PATH" timeout --kill-after=10 "$SUITE_TIMEOUT" \
        "$NODE" "$(suite_cli "$v")" server --url "$URL" --scenario "$s" --spec-version "$spec" -o "$vout" \
        >>"$vout/run.log" 2>&1 || true
    done
    say "suite $v (--spec-version $spec): ran $n of the requested scenarios in $((SECONDS - started))s"
  else
    say "suite $v (--spec-version $spec): running $(wc -l <"$vout/scenarios.txt") scenarios against $URL"
    rc=0
    PATH="$NODE_DIR/node_modules/.bin:$PATH" timeout --kill-after=10 "$SUITE_TIMEOUT" \
      "$NODE" "$(suite_cli "$v")" server --url "$URL" --suite all --spec-version "$spec" -o "$vout" \
      >"$vout/run.log" 2>&1 || rc=$?
    [[ $rc -eq 124 || $rc -eq 137 ]] && say "suite $v hit the ${SUITE_TIMEOUT}s timeout (scenarios without results count as failed)"
    say "suite $v done in $((SECONDS - started))s (log $vout/run.log)"
  fi
done

stop_server

compare_args=(--results "$OUT" --expected "$EXPECTED" --versions "${VERSIONS[*]}")
[[ ${#SCENARIOS[@]} -gt 0 ]] && compare_args+=(--scenarios "${SCENARIOS[*]}")
[[ "${CATALOG_CONFORMANCE_FAIL_ON_WARNING:-0}" == 1 ]] && compare_args+=(--fail-on-warning)
STATUS=0
"$NODE" "$SCRIPT_DIR/conformance-compare.mjs" "${compare_args[@]}" || STATUS=$?
exit "$STATUS"
