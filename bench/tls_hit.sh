#!/usr/bin/env bash
# Cache hits over TLS: hoard vs. nginx proxy_cache, HTTP/2 and HTTP/1.1.
#
# Both proxies terminate TLS with the same ECDSA P-256 certificate, use both
# CPUs (nginx: 2 workers; hoard: 2 worker threads) and sit in front of the
# same nginx origin. h2load drives them (HTTP/2: -c16 -m10; HTTP/1.1:
# --h1 -c16), sharing the machine with them, the same for both. nginx is at
# its best setting for the test: `keepalive_requests` raised so that it does
# not close each HTTP/2 connection after 1,000 requests (its default), and
# `ssl_session_cache` on. Every measured request is a hit.
#
# PIN=1 gives each proxy CPU 0 alone (nginx: 1 worker; hoard: 1 thread) and
# h2load CPU 1: the proxy, not the client, is then what runs out of CPU, so
# req/s compare the proxies (shared, h2load -t1 can be the limit of both).
# CLIENT=wrk drives the HTTP/1.1 rows with wrk (OpenSSL, -t1 -c16) instead:
# a client that spends less CPU per request, for when h2load on its one CPU
# is what runs out (the proxies' CPU columns say whether they were busy).
#
# Environment knobs (all optional):
#   DURATION=10        seconds per h2load run
#   RUNS=3             runs per cell, interleaved; the median is shown
#   OBJECTS="1k"       objects (1k, 64k)
#   MODES="h2 h1"      protocols
#   PROXIES="nginx hoard"
#   PIN=0              1: proxy on CPU 0 alone, h2load on CPU 1
#   CLIENT=h2load      wrk: HTTP/1.1 rows driven by wrk -t1 -c16
#   HOARD_BIN, SKIP_BUILD=1, KEEP=1, BASE_PORT=18600
set -euo pipefail

BENCH_NAME=tls_hit
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
RUNS="${RUNS:-3}"
OBJECTS="${OBJECTS:-1k}"
MODES="${MODES:-h2 h1}"
PROXIES="${PROXIES:-nginx hoard}"
PIN="${PIN:-0}"
CLIENT="${CLIENT:-h2load}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18600}"

require_whole DURATION "a whole number of seconds"
require_whole RUNS
require_positive DURATION RUNS

ensure_tools nginx:nginx-light h2load:nghttp2-client openssl:openssl curl:curl
case "$CLIENT" in
    h2load) ;;
    wrk) ensure_tools wrk:wrk ;;
    *) die "CLIENT must be h2load or wrk, not $CLIENT" ;;
esac
NCPU="$(nproc)"
if [ "$PIN" = 1 ]; then
    [ "$NCPU" -ge 2 ] || die "PIN=1 needs 2 CPUs"
    WORKERS=1 PROXY_CPU=(taskset -c 0) CLIENT_CPU=(taskset -c 1)
else
    WORKERS=2 PROXY_CPU=() CLIENT_CPU=()
fi
raise_nofile
has "$PROXIES" hoard && build_hoard

start_run tls
free_port ORIGIN_PORT
free_port NGINX_PORT
free_port HOARD_PORT

# ------------------------------------------------------------- certificate ----
localhost_cert

# ------------------------------------------------------------------ origin ----
mkdir -p "$RUN/www"
head -c 1024 /dev/urandom >"$RUN/www/1k"
head -c 65536 /dev/urandom >"$RUN/www/64k"
write_static_origin
start_nginx origin
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"

# ------------------------------------------------------------------ proxies ----
mkdir -p "$RUN/nginx/cache"
{
    nginx_common nginx | sed "s/^worker_processes 1;/worker_processes $WORKERS;/"
    cat <<EOF
http {
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
    open_file_cache max=1024 inactive=60s;
$(nginx_temp_paths nginx)
    proxy_cache_path $RUN/nginx/cache levels=1:2 keys_zone=bench:16m max_size=256m inactive=1h use_temp_path=off;
    upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 32; }
    server {
        listen 127.0.0.1:$NGINX_PORT ssl http2 backlog=4096;
        ssl_certificate $RUN/cert.pem;
        ssl_certificate_key $RUN/key.pem;
        ssl_session_cache shared:SSL:10m;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench;
            add_header X-Cache \$upstream_cache_status always;
        }
    }
}
EOF
} >"$RUN/nginx.conf"

cat >"$RUN/hoard.toml" <<EOF
[[listener]]
address = "127.0.0.1:$HOARD_PORT"
http2 = true
tls = { cert = "$RUN/cert.pem", key = "$RUN/key.pem" }

[server]
threads = $WORKERS
http2_max_streams = 128

[cache]
memory_size = "256MiB"

[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN_PORT"]

[[site]]
hosts = ["localhost"]
[[site.route]]
prefix = "/"
upstream = "origin"
EOF

declare -A PORT=([nginx]=$NGINX_PORT [hoard]=$HOARD_PORT)
declare -A PID
if has "$PROXIES" nginx; then
    start_nginx nginx "${PROXY_CPU[@]}"
    PID[nginx]=$STARTED_PID
    wait_port "$NGINX_PORT" nginx "$STARTED_PID"
fi
if has "$PROXIES" hoard; then
    "$HOARD_BIN" check --config "$RUN/hoard.toml" >/dev/null || die "hoard check failed on $RUN/hoard.toml"
    spawn "$RUN/hoard.log" "${PROXY_CPU[@]}" "$HOARD_BIN" run --config "$RUN/hoard.toml"
    PID[hoard]=$STARTED_PID
    wait_port "$HOARD_PORT" hoard "$STARTED_PID" "$RUN/hoard.log"
fi

# ------------------------------------------------------------------ warm-up ----
for p in $PROXIES; do
    for o in $OBJECTS; do
        url="https://localhost:${PORT[$p]}/$o"
        curl -sk --http2 -o /dev/null "$url" || die "$p: $url failed"
        curl -sk --http2 -o "$RUN/got" -D "$RUN/head" "$url" || die "$p: $url failed"
        cmp -s "$RUN/got" "$RUN/www/$o" || die "$p: $o body differs from the origin's"
        grep -Eqi '^(x-cache: HIT|cache-status: .*hit)' "$RUN/head" || die "$p: second $o is not a hit: $(cat "$RUN/head")"
    done
done

# ------------------------------------------------------------------ runs ----
busy_ticks() { # pid: "utime stime" of a process (all its threads) and its children
    local u=0 s=0 pids="$1" c cu cs
    for c in $(pgrep -P "$1" || true); do pids="$pids $c"; done
    for c in $pids; do
        read -r cu cs < <(awk '{ print $14, $15 }' "/proc/$c/stat" 2>/dev/null || echo 0 0)
        u=$((u + cu)); s=$((s + cs))
    done
    echo "$u $s"
}

declare -A RESULT
for run in $(seq "$RUNS"); do
    for o in $OBJECTS; do
        for m in $MODES; do
            for p in $PROXIES; do
                url="https://localhost:${PORT[$p]}/$o"
                if [ "$m" = h2 ]; then args=(-c16 -m10); else args=(--h1 -c16); fi
                out="$RUN/client.$p.$o.$m.$run"
                before=$(busy_ticks "${PID[$p]}")
                if [ "$m" = h1 ] && [ "$CLIENT" = wrk ]; then
                    "${CLIENT_CPU[@]}" wrk -t1 -c16 -d "${DURATION}s" "$url" >"$out" 2>&1 \
                        || die "wrk failed against $p ($o): $(tail -3 "$out")"
                    after=$(busy_ticks "${PID[$p]}")
                    rps=$(awk '/^Requests\/sec:/ { print int($2) }' "$out")
                    total=$(awk '/ requests in / { print $1 }' "$out")
                    ! grep -q "Non-2xx\|Socket errors" "$out" || die "$p ($o): wrk saw errors: $(grep 'Non-2xx\|Socket errors' "$out")"
                else
                    "${CLIENT_CPU[@]}" h2load "${args[@]}" -t1 -D "$DURATION" "$url" >"$out" 2>&1 \
                        || die "h2load failed against $p ($m, $o): $(tail -3 "$out")"
                    after=$(busy_ticks "${PID[$p]}")
                    rps=$(awk '/^finished in/ { gsub(",", "", $4); print int($4) }' "$out")
                    ok=$(awk '/^requests:/ { print $8 }' "$out")
                    total=$(awk '/^requests:/ { print $2 }' "$out")
                    [ "$ok" = "$total" ] || die "$p ($m, $o): $ok of $total requests succeeded"
                fi
                read -r bu bs <<<"$before"; read -r au as <<<"$after"
                cpu=$(awk -v u=$((au - bu)) -v s=$((as - bs)) -v hz="$CLK_TCK" -v n="$total" \
                    'BEGIN { printf "%.1f:%.1f", (n > 0 ? (u + s) / hz * 1e6 / n : 0), (n > 0 ? s / hz * 1e6 / n : 0) }')
                RESULT[$p,$o,$m]="${RESULT[$p,$o,$m]:-} $rps:$cpu"
                log "run $run $o $m $p: $rps req/s, ${cpu%%:*} cpu µs/req (${cpu##*:} in the kernel)"
            done
        done
    done
done

median() { # "rps:cpu:sys ...": the entry with the median rps
    tr ' ' '\n' <<<"$1" | grep . | sort -t: -k1,1n | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'
}
span() { tr ' ' '\n' <<<"$1" | grep . | cut -d: -f1 | sort -n | awk 'NR == 1 { lo = $0 } { hi = $0 } END { print lo "-" hi }'; }

report_start tls_hit
{
    echo "# Cache hits over TLS ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev ($WORKERS threads), nginx $(nginx -v 2>&1 | cut -d/ -f2) ($WORKERS workers, keepalive_requests 10000000)$([ "$PIN" = 1 ] && echo "; PIN=1: each proxy on CPU 0 alone, h2load on CPU 1")"
    echo "- h2load -t1 -D $DURATION: h2 = -c16 -m10, h1 = $([ "$CLIENT" = wrk ] && echo "wrk -t1 -c16 (OpenSSL)" || echo "--h1 -c16"); $RUNS runs per cell, median shown"
    echo
    echo "| object | protocol | proxy | req/s | req/s range | cpu µs/req | of which kernel |"
    echo "|---|---|---|---|---|---|---|"
    for o in $OBJECTS; do
        for m in $MODES; do
            for p in $PROXIES; do
                IFS=: read -r rps cpu sys <<<"$(median "${RESULT[$p,$o,$m]}")"
                echo "| $o | $m | $p | $rps | $(span "${RESULT[$p,$o,$m]}") | $cpu | $sys |"
            done
            if has "$PROXIES" nginx && has "$PROXIES" hoard; then
                IFS=: read -r hr hc hs <<<"$(median "${RESULT[hoard,$o,$m]}")"
                IFS=: read -r nr nc ns <<<"$(median "${RESULT[nginx,$o,$m]}")"
                awk -v o="$o" -v m="$m" -v hr="$hr" -v nr="$nr" -v hc="$hc" -v nc="$nc" -v hs="$hs" -v ns="$ns" \
                    'BEGIN { printf "| %s | %s | **hoard/nginx** | **%.2fx** | | %.2fx | %.2fx |\n", o, m, hr / nr, hc / nc, (ns > 0 ? hs / ns : 0) }'
            fi
        done
    done
} >"$REPORT"
report_done
