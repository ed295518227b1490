#!/usr/bin/env bash
# WebSocket echo through the proxy: SOCKETS WebSockets, each with one message
# in flight (send, wait for the echo, send the next), through hoard and
# through nginx (`proxy_http_version 1.1` with the Upgrade and Connection
# fields passed, its documented WebSocket setup), one worker each on the
# same CPU, in the same run. The echo server and the load are
# `crates/hoard-server/examples/ws_echo.rs` (one thread each, on the other
# CPU). Messages per second, for small and for 16 KiB messages.
#
#   bench/websocket.sh                  # 10 s per measurement, 3 runs
#   DURATION=3 RUNS=1 bench/websocket.sh
#
# Knobs: SOCKETS (64), SIZES ("64 16384"), WARMUP (3 s per proxy),
# PROXY_CPU (0), LOAD_CPU (1), BASE_PORT (19180), KEEP=1.
set -euo pipefail
BENCH_NAME=websocket
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
RUNS="${RUNS:-3}"
SOCKETS="${SOCKETS:-64}"
SIZES="${SIZES:-64 16384}"
PROXY_CPU="${PROXY_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
NEXT_PORT="${BASE_PORT:-19180}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
SKIP_BUILD="${SKIP_BUILD:-0}"
KEEP="${KEEP:-0}"
require_positive DURATION RUNS SOCKETS

ensure_tools nginx:nginx-light
check_cpus PROXY_CPU LOAD_CPU "the proxies and the echo server/load"
raise_nofile
build_hoard
WS_ECHO="$ROOT/target/release/examples/ws_echo"
if [ "$SKIP_BUILD" != 1 ]; then
    log "building the echo server and load (cargo build --release --example ws_echo)"
    (cd "$ROOT" && cargo build --release -p hoard-server --example ws_echo) || die "cargo build failed"
fi
[ -x "$WS_ECHO" ] || die "ws_echo not found at $WS_ECHO"
start_run websocket

# ------------------------------------------------------------ origin
free_port ORIGIN_PORT
spawn "$RUN/origin.log" taskset -c "$LOAD_CPU" "$WS_ECHO" serve "127.0.0.1:$ORIGIN_PORT"
wait_port "$ORIGIN_PORT" origin "$STARTED_PID" "$RUN/origin.log"

# ------------------------------------------------------------ proxies
free_port NGINX_PORT
{
    nginx_common nginx
    cat <<EOF
http {
    access_log off;
$(nginx_temp_paths nginx)
    map \$http_upgrade \$connection_upgrade {
        default upgrade;
        ''      close;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT backlog=4096;
        location / {
            proxy_pass http://127.0.0.1:$ORIGIN_PORT;
            proxy_http_version 1.1;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
            # Its best setting here: the buffer each direction of a tunnel
            # uses (4 KiB by default).
            proxy_buffer_size 64k;
            proxy_buffers 4 64k;
            proxy_busy_buffers_size 128k;
        }
    }
}
EOF
} >"$RUN/nginx.conf"
start_nginx nginx taskset -c "$PROXY_CPU"
wait_port "$NGINX_PORT" nginx "$STARTED_PID"

free_port HOARD_PORT
spawn "$RUN/hoard.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" \
    --upstream "http://127.0.0.1:$ORIGIN_PORT" \
    --listen "127.0.0.1:$HOARD_PORT" --threads 1
wait_port "$HOARD_PORT" hoard "$STARTED_PID" "$RUN/hoard.log"

# ------------------------------------------------------------ load
measure() { # port size seconds: messages/s
    local out
    out="$(taskset -c "$LOAD_CPU" "$WS_ECHO" load "ws://127.0.0.1:$1/ws" "$SOCKETS" "$3" "$2" 2>&1)" \
        || { echo "$out" >>"$RUN/load.log"; echo ERR; return; }
    echo "$out" >>"$RUN/load.log"
    awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           if (v["errors"] > 0) { print "ERR"; exit }
           printf "%.0f\n", v["messages"] / v["seconds"] }' <<<"$out"
}

for p in "nginx $NGINX_PORT" "hoard $HOARD_PORT"; do
    set -- $p
    [ "$(measure "$2" 64 "${WARMUP:-3}")" != ERR ] || die "$1: the warm-up failed (see $RUN/load.log)"
done

declare -A mps
for size in $SIZES; do
    for run in $(seq "$RUNS"); do
        for p in "nginx $NGINX_PORT" "hoard $HOARD_PORT"; do
            set -- $p
            r="$(measure "$2" "$size" "$DURATION")"
            [ "$r" != ERR ] || die "$1: errors under load (see $RUN/load.log)"
            mps[$1-$size]="${mps[$1-$size]:-} $r"
            echo "$1, $size-byte messages, run $run: $r messages/s" >>"$RUN/summary"
            log "$1, $size-byte messages, run $run: $r messages/s"
        done
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

report_start websocket
{
    echo "# WebSocket echo ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev (built $(hoard_built)), nginx $(nginx -v 2>&1 | sed 's/.*\///')"
    echo "- $SOCKETS WebSockets, one message in flight on each; ${DURATION}s per measurement, median of $RUNS runs; proxies (one worker) on CPU $PROXY_CPU, echo server and load on CPU $LOAD_CPU"
    echo
    echo "| message | hoard messages/s | nginx messages/s | ratio |"
    echo "|---|---|---|---|"
    for size in $SIZES; do
        h="$(median <<<"${mps[hoard-$size]}")"
        n="$(median <<<"${mps[nginx-$size]}")"
        echo "| $size B | $h | $n | $(awk -v a="$h" -v b="$n" 'BEGIN { printf "%.2fx", a / b }') |"
    done
    echo
    echo "Each run:"
    echo
    sed 's/^/- /' "$RUN/summary"
} >"$REPORT"
report_done
