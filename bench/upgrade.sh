#!/usr/bin/env bash
# Binary upgrade under load: a client loop (upgrade_client.py: NEW threads
# opening a connection per request, KEEP threads on keep-alive connections;
# strict, nothing retried) runs for DURATION seconds against each proxy
# serving a cached 1 KiB object; after UPGRADE_AT seconds the proxy is
# upgraded to its own binary:
#   hoard: `hoard upgrade --pid-file F` (SIGUSR2; the new process takes the
#          listening sockets and the old one drains once it is ready)
#   nginx: SIGUSR2 to the master, then, once the new master wrote its pid
#          file, SIGQUIT to the old master (nginx's documented procedure)
# Reported: requests, failed requests, and that the serving pid changed.
#
# Environment knobs (all optional):
#   DURATION=10 UPGRADE_AT=3 NEW=4 KEEP=4
#   PROXIES="hoard nginx"
#   HOARD_BIN=path SKIP_BUILD=1 KEEP_RUN=1 BASE_PORT=18380   as in hit.sh
#   (KEEP_RUN is lib.sh's KEEP: KEEP here is the number of keep-alive threads)
set -euo pipefail

BENCH_NAME=upgrade
KEEP_THREADS="${KEEP:-4}"
KEEP="${KEEP_RUN:-0}"
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
UPGRADE_AT="${UPGRADE_AT:-3}"
NEW="${NEW:-4}"
PROXIES="${PROXIES:-hoard nginx}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18380}"

require_whole DURATION "a whole number of seconds"
require_whole UPGRADE_AT "a whole number of seconds"
require_whole NEW
require_whole KEEP_THREADS
require_positive DURATION
[ "$UPGRADE_AT" -lt "$DURATION" ] || die "UPGRADE_AT must be less than DURATION"

ensure_tools nginx:nginx-light curl:curl python3:python3
NCPU="$(nproc)"
raise_nofile
if has "$PROXIES" hoard; then build_hoard; fi

start_run upgrade
free_port ORIGIN_PORT
free_port NGINX_PORT
free_port HOARD_PORT

mkdir -p "$RUN/www"
head -c 1024 /dev/urandom >"$RUN/www/1k.bin"
write_static_origin
start_nginx origin
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"

# The daemonized nginx (a master whose parent is not the one that started
# it: nginx ignores SIGUSR2 otherwise); stopped on exit by its pid files.
NGINX_DIR="$RUN/nginx"
stop_nginx() {
    local f
    for f in "$NGINX_DIR/nginx.pid.oldbin" "$NGINX_DIR/nginx.pid"; do
        [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true
    done
}
stop_hoard() {
    local f
    for f in "$RUN/hoard/hoard.pid.oldbin" "$RUN/hoard/hoard.pid"; do
        [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null || true
    done
}
trap 'stop_nginx; stop_hoard; cleanup' EXIT

if has "$PROXIES" hoard; then
    mkdir -p "$RUN/hoard"
    cat >"$RUN/hoard/hoard.toml" <<EOF
[[listener]]
address = "127.0.0.1:$HOARD_PORT"
[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN_PORT"]
[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
EOF
    "$HOARD_BIN" check --config "$RUN/hoard/hoard.toml" >/dev/null
    # Not through spawn: the process that serves at the end is not this one.
    "$HOARD_BIN" run --config "$RUN/hoard/hoard.toml" --pid-file "$RUN/hoard/hoard.pid" \
        >"$RUN/hoard/stdout.log" 2>"$RUN/hoard/stderr.log" &
    wait_port "$HOARD_PORT" hoard "$!" "$RUN/hoard/stderr.log"
fi
if has "$PROXIES" nginx; then
    mkdir -p "$NGINX_DIR/cache" "$NGINX_DIR/tmp"
    cat >"$RUN/nginx.conf" <<EOF
$NGINX_USER
daemon on;
worker_processes 1;
worker_rlimit_nofile $NOFILE;
pid $NGINX_DIR/nginx.pid;
error_log $NGINX_DIR/error.log notice;
events { worker_connections 4096; use epoll; }
http {
    access_log off;
    default_type application/octet-stream;
    keepalive_timeout 75s;
    keepalive_requests 10000000;
$(nginx_temp_paths nginx)
    proxy_cache_path $NGINX_DIR/cache levels=1:2 keys_zone=bench:16m max_size=256m inactive=1h use_temp_path=off;
    server {
        listen 127.0.0.1:$NGINX_PORT backlog=4096;
        location / {
            proxy_pass http://127.0.0.1:$ORIGIN_PORT;
            proxy_cache bench;
        }
    }
}
EOF
    nginx -t -q -e "$NGINX_DIR/error.log" -c "$RUN/nginx.conf" || die "nginx config is invalid"
    # By its full path: nginx executes argv[0] as it is for the upgrade.
    "$(command -v nginx)" -e "$NGINX_DIR/error.log" -c "$RUN/nginx.conf"
    for _ in $(seq 100); do [ -s "$NGINX_DIR/nginx.pid" ] && break; sleep 0.1; done
    wait_port "$NGINX_PORT" nginx "$(cat "$NGINX_DIR/nginx.pid")"
fi

declare -A PORT=([hoard]="$HOARD_PORT" [nginx]="$NGINX_PORT")
declare -A PIDFILE=([hoard]="$RUN/hoard/hoard.pid" [nginx]="$NGINX_DIR/nginx.pid")
declare -A RESULT BEFORE AFTER

wait_new_pid() { # pidfile oldpid: until the file names another process (10 s)
    local i v
    for i in $(seq 200); do
        v="$(cat "$1" 2>/dev/null || true)"
        if [ -n "$v" ] && [ "$v" != "$2" ]; then return 0; fi
        sleep 0.05
    done
    die "no new process wrote $1 within 10 s (see $RUN)"
}

upgrade() { # proxy
    local p="$1" old
    old="$(cat "${PIDFILE[$p]}")"
    if [ "$p" = hoard ]; then
        "$HOARD_BIN" upgrade --pid-file "${PIDFILE[$p]}" >/dev/null
        wait_new_pid "${PIDFILE[$p]}" "$old"
    else
        kill -USR2 "$old"
        wait_new_pid "${PIDFILE[$p]}" "$old"
        # The new master's workers accept next to the old ones; then the
        # old master stops accepting, drains and exits.
        kill -QUIT "$old"
    fi
    for _ in $(seq 200); do kill -0 "$old" 2>/dev/null || break; sleep 0.05; done
}

for p in $PROXIES; do
    for _ in 1 2; do
        curl -sS --fail -o /dev/null "http://127.0.0.1:${PORT[$p]}/1k.bin" || die "$p: warm-up failed"
    done
    BEFORE[$p]="$(cat "${PIDFILE[$p]}")"
    log "$p: ${DURATION}s client loop ($NEW new-connection + $KEEP_THREADS keep-alive threads), upgrade at ${UPGRADE_AT}s"
    python3 "$BENCH_DIR/upgrade_client.py" "127.0.0.1:${PORT[$p]}" /1k.bin 1024 "$DURATION" "$NEW" "$KEEP_THREADS" \
        >"$RUN/$p.json" &
    client=$!
    sleep "$UPGRADE_AT"
    upgrade "$p"
    wait "$client"
    AFTER[$p]="$(cat "${PIDFILE[$p]}")"
    RESULT[$p]="$(cat "$RUN/$p.json")"
done

report_start upgrade
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
{
    echo "# binary upgrade under load ($STAMP)"
    echo
    machine_line
    echo "- hoard $git_rev ($HOARD_BIN); nginx $(nginx -v 2>&1 | sed 's/.*nginx\///')"
    echo "- ${DURATION}s of GETs of a cached 1 KiB object: $NEW threads with a new connection per request, $KEEP_THREADS on keep-alive connections; strict (no retry); one upgrade to the same binary at ${UPGRADE_AT}s"
    echo
    echo "| proxy | requests | failed | new-connection requests | keep-alive requests | pid before → after |"
    echo "|---|---:|---:|---:|---:|---|"
    for p in $PROXIES; do
        r="${RESULT[$p]}"
        echo "| $p | $(field "$r" requests) | $(field "$r" errors) | $(field "$r" new) | $(field "$r" keep) | ${BEFORE[$p]} → ${AFTER[$p]} |"
    done
    echo
    for p in $PROXIES; do
        echo "- $p failures by kind: $(field "${RESULT[$p]}" kinds)"
    done
} >"$REPORT"
report_done
