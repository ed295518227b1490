#!/usr/bin/env bash
# HTTP/3 against HTTP/2 over TLS on the same hoard listener: cache hits of
# 1 KiB and 64 KiB objects (req/s and hoard's CPU per request), and the
# memory an idle connection costs (QUIC against HTTP/2 over TLS).
#
# Two ways. First one client drives both protocols: the `h3bench` example
# (hyper for HTTP/2, quinn + h3 for HTTP/3), so the ratio compares hoard's
# protocols, not two clients. Then clients hoard did not write, one
# connection each (Debian's h2load and curl are built without QUIC):
# ngtcp2's `gtlsclient` (package ngtcp2-client) for HTTP/3 against
# `h2load -c1 -m100` for HTTP/2 over TLS, OUTSIDE_N requests each; their
# row is hoard's CPU per request (the two clients differ in speed, so
# their req/s are not compared). hoard runs one worker thread on CPU 0,
# the client on CPU 1. Every measured request is a hit. For the idle cost,
# a fresh hoard per protocol holds IDLE connections (each after one GET);
# the cost is the growth of its resident memory divided by IDLE.
#
# Environment knobs (all optional):
#   DURATION=10   seconds per run      RUNS=3     runs per cell (median)
#   OBJECTS="1k 64k"   CONNS=4   STREAMS=16   IDLE=500   OUTSIDE_N=50000
#   HOARD_BIN, SKIP_BUILD=1, KEEP=1, BASE_PORT=18700
set -euo pipefail

BENCH_NAME=http3
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
RUNS="${RUNS:-3}"
OBJECTS="${OBJECTS:-1k 64k}"
CONNS="${CONNS:-4}"
STREAMS="${STREAMS:-16}"
IDLE="${IDLE:-500}"
OUTSIDE_N="${OUTSIDE_N:-50000}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18700}"

require_whole DURATION "a whole number of seconds"
require_whole RUNS
require_positive DURATION RUNS CONNS STREAMS IDLE OUTSIDE_N

ensure_tools nginx:nginx-light openssl:openssl curl:curl taskset:util-linux \
    gtlsclient:ngtcp2-client h2load:nghttp2-client
NCPU="$(nproc)"
raise_nofile
build_hoard
build_h3bench
CLIENT="$H3BENCH"

start_run http3
free_port ORIGIN_PORT
free_port HOARD_PORT

localhost_cert

mkdir -p "$RUN/www"
head -c 1024 /dev/urandom >"$RUN/www/1k"
head -c 65536 /dev/urandom >"$RUN/www/64k"
write_static_origin
start_nginx origin
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"

cat >"$RUN/hoard.toml" <<TOML
[[listener]]
address = "127.0.0.1:$HOARD_PORT"
http2 = true
http3 = true
tls = { cert = "$RUN/cert.pem", key = "$RUN/key.pem" }

[server]
threads = 1
http2_max_streams = 128
max_connections = 100000

[cache]
memory_size = "256MiB"

[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN_PORT"]

[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
TOML
"$HOARD_BIN" check --config "$RUN/hoard.toml" >/dev/null || die "hoard check failed on $RUN/hoard.toml"

start_hoard() {
    spawn "$RUN/hoard.log" taskset -c 0 "$HOARD_BIN" run --config "$RUN/hoard.toml"
    HOARD_PID=$STARTED_PID
    wait_port "$HOARD_PORT" hoard "$STARTED_PID" "$RUN/hoard.log"
}

busy_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

start_hoard
for o in $OBJECTS; do
    curl -sk -o /dev/null "https://localhost:$HOARD_PORT/$o" || die "warm-up of $o failed"
    curl -sk -D "$RUN/head" -o "$RUN/got" "https://localhost:$HOARD_PORT/$o"
    cmp -s "$RUN/got" "$RUN/www/$o" || die "$o differs from the origin's"
    grep -qi '^cache-status: .*hit' "$RUN/head" || die "$o is not a hit"
    grep -qi '^alt-svc: h3=' "$RUN/head" || die "no Alt-Svc on the TLS listener"
done

declare -A RESULT
for run in $(seq "$RUNS"); do
    for o in $OBJECTS; do
        for m in h2 h3; do
            before=$(busy_ticks "$HOARD_PID")
            out=$(taskset -c 1 "$CLIENT" load "$m" "127.0.0.1:$HOARD_PORT" "$RUN/cert.pem" "/$o" \
                "$CONNS" "$STREAMS" "$DURATION") || die "client failed ($m, $o)"
            after=$(busy_ticks "$HOARD_PID")
            read -r _ n _ failed _ secs <<<"$out"
            [ "$failed" = 0 ] || die "$m $o: $failed requests failed"
            rps=$(awk -v n="$n" -v s="$secs" 'BEGIN { printf "%d", n / s }')
            cpu=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$n" \
                'BEGIN { printf "%.1f", (n > 0 ? t / hz * 1e6 / n : 0) }')
            RESULT[$o,$m]="${RESULT[$o,$m]:-} $rps:$cpu"
            log "run $run $o $m: $rps req/s, $cpu cpu µs/req"
        done
    done
done

# Clients hoard did not write, one connection each, 1 KiB hits.
gtls() { # n [quiet]: n requests of /1k on one HTTP/3 connection
    taskset -c 1 gtlsclient ${2:+-q} --exit-on-all-streams-close --no-quic-dump --no-http-dump \
        -n "$1" 127.0.0.1 "$HOARD_PORT" "https://localhost:$HOARD_PORT/1k"
}
hits=$(gtls 200 2>&1 | grep -c '\[cache-status: hoard; hit') || true
[ "$hits" = 200 ] || die "gtlsclient: $hits of 200 responses were hits"
declare -A OUTSIDE
for run in $(seq "$RUNS"); do
    for m in h2 h3; do
        before=$(busy_ticks "$HOARD_PID")
        t0=$(date +%s.%N)
        if [ "$m" = h3 ]; then
            gtls "$OUTSIDE_N" quiet >"$RUN/outside.h3" 2>&1 || die "gtlsclient failed: $(tail -3 "$RUN/outside.h3")"
        else
            taskset -c 1 h2load -c1 -m100 -n "$OUTSIDE_N" "https://127.0.0.1:$HOARD_PORT/1k" >"$RUN/outside.h2" 2>&1
            grep -q "$OUTSIDE_N succeeded, 0 failed" "$RUN/outside.h2" || die "h2load: $(grep succeeded "$RUN/outside.h2")"
        fi
        t1=$(date +%s.%N)
        after=$(busy_ticks "$HOARD_PID")
        rps=$(awk -v n="$OUTSIDE_N" -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", n / (b - a) }')
        cpu=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$OUTSIDE_N" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
        OUTSIDE[$m]="${OUTSIDE[$m]:-} $cpu:$rps"
        log "outside run $run $m: $cpu hoard cpu µs/req ($rps req/s)"
    done
done
stop_pid "$HOARD_PID"

declare -A IDLE_COST
for m in h2 h3; do
    start_hoard
    sleep 0.5
    before=$(rss_kb "$HOARD_PID")
    spawn "$RUN/idle.$m" taskset -c 1 "$CLIENT" idle "$m" "127.0.0.1:$HOARD_PORT" "$RUN/cert.pem" /1k "$IDLE"
    IDLE_PID=$STARTED_PID
    for _ in $(seq 600); do
        grep -q ready "$RUN/idle.$m" && break
        kill -0 "$IDLE_PID" 2>/dev/null || die "the idle client failed: $(tail -3 "$RUN/idle.$m")"
        sleep 0.1
    done
    grep -q ready "$RUN/idle.$m" || die "the idle client never got ready"
    sleep 0.5
    after=$(rss_kb "$HOARD_PID")
    IDLE_COST[$m]=$(( (after - before) * 1024 / IDLE ))
    log "idle $m: $before -> $after kB, $((IDLE_COST[$m])) bytes per connection"
    stop_pid "$IDLE_PID"
    stop_pid "$HOARD_PID"
done

median() { tr ' ' '\n' <<<"$1" | grep . | sort -t: -k1,1n | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'; }
median_cpu() { tr ' ' '\n' <<<"$1" | grep . | sort -t: -k1,1g | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'; }

report_start http3
{
    echo "# HTTP/3 against HTTP/2 over TLS, same listener ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev, 1 worker thread on CPU 0; client \`h3bench\` on CPU 1: $CONNS connections x $STREAMS streams, ${DURATION}s; $RUNS runs per cell, median shown"
    echo
    echo "| object | protocol | req/s | hoard cpu µs/req |"
    echo "|---|---|---|---|"
    for o in $OBJECTS; do
        for m in h2 h3; do
            r=$(median "${RESULT[$o,$m]}")
            echo "| $o | $m | ${r%%:*} | ${r##*:} |"
        done
        h3=$(median "${RESULT[$o,h3]}"); h2=$(median "${RESULT[$o,h2]}")
        awk -v o="$o" -v a="${h3%%:*}" -v b="${h2%%:*}" -v ac="${h3##*:}" -v bc="${h2##*:}" \
            'BEGIN { printf "| %s | **h3/h2** | **%.2fx** | %.2fx |\n", o, a / b, ac / bc }'
    done
    echo
    echo "Clients hoard did not write, one connection each, $OUTSIDE_N hits of 1 KiB per run, median of $RUNS:"
    echo
    echo "| protocol | client | hoard cpu µs/req | req/s (client-bound) |"
    echo "|---|---|---|---|"
    h2=$(median_cpu "${OUTSIDE[h2]}"); h3=$(median_cpu "${OUTSIDE[h3]}")
    echo "| HTTP/2 over TLS | \`h2load -c1 -m100\` | ${h2%%:*} | ${h2##*:} |"
    echo "| HTTP/3 | \`gtlsclient\` (ngtcp2) | ${h3%%:*} | ${h3##*:} |"
    awk -v a="${h2%%:*}" -v b="${h3%%:*}" 'BEGIN { printf "| **HTTP/3 against HTTP/2, per CPU** | | **%.2fx** | |\n", a / b }'
    echo
    echo "Idle connection (each after one GET; growth of hoard's resident memory / $IDLE):"
    echo
    echo "| protocol | bytes per idle connection |"
    echo "|---|---|"
    echo "| HTTP/2 over TLS | ${IDLE_COST[h2]} |"
    echo "| HTTP/3 (QUIC) | ${IDLE_COST[h3]} |"
} >"$REPORT"
report_done
