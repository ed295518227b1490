#!/usr/bin/env bash
# What an idle client connection costs: hoard against nginx in the same run.
#
# For each protocol (plain HTTP/1.1, HTTP/1.1 over TLS, HTTP/2 over TLS,
# HTTP/3 over QUIC) a fresh server gets IDLE connections, each of which
# fetches one cached 1 KiB object and then stays open and silent; after
# SETTLE seconds the growth of the server's resident memory (nginx: its one
# worker process) is divided by IDLE. nginx 1.22 from Debian has no HTTP/3,
# so that row is hoard's alone. Then one hoard holds MANY idle plain
# connections (100,000 by default) and its resident memory is reported:
# this script raises its own file-descriptor limit for that (as root), and
# the client spreads the connections over 127.0.0.1, .2, ... (one source
# address has about 28,000 ephemeral ports).
#
# The client is the `h3bench` example (idle mode), on CPU 1; the servers run
# one worker on CPU 0.
#
# Environment knobs (all optional):
#   IDLE=2000   connections per protocol     MANY=100000 (0: skip that part)
#   SETTLE=3    seconds idle before the reading (hoard releases an idle
#               connection's buffers after 1 s)
#   CPU_SECS=5  then the server's CPU time over this many idle seconds,
#               reported per 1,000 idle connections (0: skip)
#   PROTOS="h1 h1s h2 h3"   SERVERS="hoard nginx"
#   HOARD_BIN, SKIP_BUILD=1, KEEP=1, BASE_PORT=18900
set -euo pipefail

BENCH_NAME=idle
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IDLE="${IDLE:-2000}"
MANY="${MANY:-100000}"
SETTLE="${SETTLE:-3}"
CPU_SECS="${CPU_SECS:-5}"
PROTOS="${PROTOS:-h1 h1s h2 h3}"
SERVERS="${SERVERS:-hoard nginx}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18900}"

require_whole IDLE
require_whole MANY
require_whole SETTLE
require_whole CPU_SECS
require_positive IDLE

ensure_tools nginx:nginx-light openssl:openssl curl:curl taskset:util-linux
NCPU="$(nproc)"
# Both servers and the client inherit this limit. Past the hard limit (it
# takes CAP_SYS_RESOURCE to raise it) the MANY part is capped, and says so.
want=$(( (MANY > IDLE ? MANY : IDLE) + 4096 ))
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$want" ]; then
    ulimit -Hn "$want" 2>/dev/null || true
fi
ulimit -n "$(ulimit -Hn)"
CAPPED=""
if [ "$(ulimit -n)" != unlimited ] && [ "$MANY" -gt $(( $(ulimit -n) - 1000 )) ]; then
    CAPPED="$MANY"
    MANY=$(( $(ulimit -n) - 1000 ))
    log "MANY capped to $MANY: the file-descriptor hard limit is $(ulimit -Hn) and cannot be raised here"
fi
[ "$IDLE" -le $(( $(ulimit -n) - 1000 )) ] || die "IDLE=$IDLE needs more open files than the limit ($(ulimit -n))"
NOFILE="$(ulimit -n)"
[ "$NOFILE" != unlimited ] || NOFILE=1048576
build_hoard
build_h3bench
CLIENT="$H3BENCH"

start_run idle
free_port ORIGIN_PORT
free_port PLAIN_PORT
free_port TLS_PORT

localhost_cert
mkdir -p "$RUN/www"
head -c 1024 /dev/urandom >"$RUN/www/1k"
write_static_origin
start_nginx origin
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"

CONNS_MAX=$(( (MANY > IDLE ? MANY : IDLE) + 1000 ))
cat >"$RUN/hoard.toml" <<TOML
[[listener]]
address = "127.0.0.1:$PLAIN_PORT"

[[listener]]
address = "127.0.0.1:$TLS_PORT"
http2 = true
http3 = true
tls = { cert = "$RUN/cert.pem", key = "$RUN/key.pem" }

[server]
threads = 1
max_connections = $CONNS_MAX

[cache]
memory_size = "64MiB"

[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN_PORT"]

[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
TOML
"$HOARD_BIN" check --config "$RUN/hoard.toml" >/dev/null || die "hoard check failed on $RUN/hoard.toml"

mkdir -p "$RUN/nginx/cache"
{
    NGINX_WORKER_CONNECTIONS=$CONNS_MAX nginx_common nginx
    cat <<EOF
http {
    access_log off;
    default_type application/octet-stream;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 10000000;
$(nginx_temp_paths nginx)
    proxy_cache_path $RUN/nginx/cache levels=1:2 keys_zone=bench:16m
                     max_size=64m inactive=1h use_temp_path=off;
    ssl_certificate $RUN/cert.pem;
    ssl_certificate_key $RUN/key.pem;
    upstream origin {
        server 127.0.0.1:$ORIGIN_PORT;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$PLAIN_PORT backlog=4096;
        listen 127.0.0.1:$TLS_PORT ssl http2 backlog=4096;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench;
        }
    }
}
EOF
} >"$RUN/nginx.conf"

rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
# cpu_ticks PID: user + system time so far, in clock ticks
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# start SERVER: starts it on CPU 0, warms the object; sets SERVER_PID (the
# process whose memory is read: nginx's worker).
start() {
    case "$1" in
    hoard)
        spawn "$RUN/hoard.log" taskset -c 0 "$HOARD_BIN" run --config "$RUN/hoard.toml"
        SERVER_PID=$STARTED_PID
        wait_port "$PLAIN_PORT" hoard "$STARTED_PID" "$RUN/hoard.log"
        ;;
    nginx)
        start_nginx nginx taskset -c 0
        local master=$STARTED_PID
        wait_port "$PLAIN_PORT" nginx "$master"
        nginx_worker "$master" nginx
        SERVER_PID=$NGINX_WORKER
        MASTER_PID=$master
        ;;
    esac
    for _ in 1 2 3; do
        curl -sk -o /dev/null "http://127.0.0.1:$PLAIN_PORT/1k" || die "$1: warm-up failed"
        curl -sk -o /dev/null "https://localhost:$TLS_PORT/1k" --resolve "localhost:$TLS_PORT:127.0.0.1" \
            || die "$1: TLS warm-up failed"
    done
}

stop() { # SERVER
    if [ "$1" = nginx ]; then stop_pid "$MASTER_PID"; else stop_pid "$SERVER_PID"; fi
}

# idle SERVER PROTO N: prints "before after" (kB) around N idle connections,
# and the server's CPU ticks over CPU_SECS of them idle
idle() {
    local port=$TLS_PORT
    [ "$2" != h1 ] || port=$PLAIN_PORT
    # A first small batch, so that what every server sets up once (TLS
    # session state, the first connection's structures) is in "before".
    spawn "$RUN/warm.$1.$2" taskset -c 1 "$CLIENT" idle "$2" "127.0.0.1:$port" "$RUN/cert.pem" /1k 16
    local warm=$STARTED_PID
    wait_ready "$RUN/warm.$1.$2" "$warm"
    sleep "$SETTLE"
    local before
    before=$(rss_kb "$SERVER_PID")
    spawn "$RUN/idle.$1.$2" taskset -c 1 "$CLIENT" idle "$2" "127.0.0.1:$port" "$RUN/cert.pem" /1k "$3"
    local pid=$STARTED_PID
    wait_ready "$RUN/idle.$1.$2" "$pid"
    sleep "$SETTLE"
    local after t0
    after=$(rss_kb "$SERVER_PID")
    t0=$(cpu_ticks "$SERVER_PID")
    sleep "$CPU_SECS"
    echo "$before $after $(( $(cpu_ticks "$SERVER_PID") - t0 ))"
    stop_pid "$pid"
    stop_pid "$warm"
}

wait_ready() { # log pid
    for _ in $(seq 3000); do
        grep -q ready "$1" && return 0
        kill -0 "$2" 2>/dev/null || die "the idle client failed: $(tail -3 "$1")"
        sleep 0.1
    done
    die "the idle client never got ready ($1)"
}

declare -A COST CPU
for s in $SERVERS; do
    for p in $PROTOS; do
        if [ "$s" = nginx ] && [ "$p" = h3 ]; then continue; fi
        start "$s"
        read -r before after ticks <<<"$(idle "$s" "$p" "$IDLE")"
        COST[$s,$p]=$(( (after - before) * 1024 / IDLE ))
        log "$s $p: $before -> $after kB: ${COST[$s,$p]} bytes per idle connection"
        if [ "$CPU_SECS" -gt 0 ]; then
            # ms of CPU per second per 1,000 idle connections
            CPU[$s,$p]=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v s="$CPU_SECS" -v n="$IDLE" \
                'BEGIN { printf "%.1f", t * 1000 / hz / s * 1000 / n }')
            log "$s $p: ${CPU[$s,$p]} ms of CPU per second per 1,000 idle connections"
        fi
        stop "$s"
    done
done

MANY_LINE=""
if [ "$MANY" -gt 0 ]; then
    start hoard
    t0=$(date +%s.%N)
    read -r before after _ <<<"$(CPU_SECS=0 idle hoard h1 "$MANY")"
    t1=$(date +%s.%N)
    MANY_LINE=$(awk -v n="$MANY" -v b="$before" -v a="$after" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%d idle plain connections held by one hoard: resident %.1f MiB -> %.1f MiB (%.0f bytes each), %.1f s to open them and settle", n, b / 1024, a / 1024, (a - b) * 1024 / n, t1 - t0 }')
    [ -z "$CAPPED" ] || MANY_LINE="$MANY_LINE (MANY=$CAPPED asked; capped by the file-descriptor hard limit, which this process cannot raise)"
    log "$MANY_LINE"
    stop hoard
fi

name() {
    case "$1" in
    h1) echo "plain HTTP/1.1" ;;
    h1s) echo "TLS, HTTP/1.1" ;;
    h2) echo "TLS, HTTP/2" ;;
    h3) echo "QUIC, HTTP/3" ;;
    esac
}
kib() { [ -n "${1:-}" ] && awk -v b="$1" 'BEGIN { printf "%.1f KiB", b / 1024 }' || echo "n/a"; }

report_start idle
{
    echo "# Memory per idle connection ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev (built $(hoard_built)) and nginx $(nginx -v 2>&1 | sed 's/.*\///'), one worker each on CPU 0; $IDLE connections per row, each after one GET of a cached 1 KiB object, then ${SETTLE} s idle; growth of resident memory / connections"
    [ "$CPU_SECS" -eq 0 ] ||
        echo "- CPU: the server's user + system time over $CPU_SECS s of the same connections idle, in ms per second per 1,000 connections (clock ticks of $(( 1000 / $(getconf CLK_TCK) )) ms: small values are coarse)"
    echo
    echo "| connection | hoard | nginx | hoard CPU | nginx CPU |"
    echo "|---|---|---|---|---|"
    for p in $PROTOS; do
        echo "| $(name "$p") | $(kib "${COST[hoard,$p]:-}") | $(kib "${COST[nginx,$p]:-}") | ${CPU[hoard,$p]:-n/a} | ${CPU[nginx,$p]:-n/a} |"
    done
    [ -z "$MANY_LINE" ] || { echo; echo "$MANY_LINE."; }
} >"$REPORT"
report_done
