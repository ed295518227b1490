#!/usr/bin/env bash
# Unique misses through the proxy to an HTTPS origin: every request is a new
# URL, so every request is an origin fetch over TLS (and a store). hoard
# (`--upstream https://...`, HTTP/1.1 to the origin), hoard with
# `protocol = "h2"` (HTTP/2 to the origin, from a config file) and nginx
# `proxy_cache` with `proxy_pass https://` (HTTP/1.1: nginx cannot speak
# HTTP/2 upstream), upstream `keepalive` and `proxy_ssl_session_reuse on`,
# one worker each on the same CPU, in the same run. The origin is an nginx
# serving 1 KiB over TLS (its own CPU); its access log counts the TLS
# connections each proxy opened and how many resumed a session.
#
#   bench/tls_origin.sh                 # 10 s per measurement, 3 runs
#   DURATION=3 RUNS=1 bench/tls_origin.sh
#
# Knobs: CONNS (64), WARMUP (5 s per proxy), PROXY_CPU (0), LOAD_CPU (1),
# BASE_PORT (19080), KEEP=1.
set -euo pipefail
BENCH_NAME=tls_origin
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
RUNS="${RUNS:-3}"
CONNS="${CONNS:-64}"
PROXY_CPU="${PROXY_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
NEXT_PORT="${BASE_PORT:-19080}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
SKIP_BUILD="${SKIP_BUILD:-0}"
KEEP="${KEEP:-0}"
require_positive DURATION RUNS CONNS

ensure_tools nginx:nginx-light wrk:wrk openssl:openssl h2load:nghttp2-client
check_cpus PROXY_CPU LOAD_CPU "the proxies and the origin/load"
raise_nofile
build_hoard
start_run tls_origin

# ------------------------------------------------------------ certificates
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -subj "/CN=bench CA" -keyout "$RUN/ca.key" -out "$RUN/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=origin.test" -keyout "$RUN/origin.key" -out "$RUN/origin.csr" 2>/dev/null
printf 'subjectAltName=DNS:origin.test,IP:127.0.0.1\n' >"$RUN/san.ext"
openssl x509 -req -in "$RUN/origin.csr" -CA "$RUN/ca.pem" -CAkey "$RUN/ca.key" \
    -CAcreateserial -days 30 -extfile "$RUN/san.ext" -out "$RUN/origin.pem" 2>/dev/null

# ------------------------------------------------------------ origin
free_port ORIGIN_PORT
BODY="$(head -c 1024 /dev/zero | tr '\0' x)"
{
    nginx_common origin
    cat <<EOF
http {
    log_format conns '\$connection \$ssl_session_reused';
    access_log $RUN/origin/access.log conns buffer=64k;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
$(nginx_temp_paths origin)
    ssl_session_cache shared:origin:10m;
    http2_max_concurrent_streams 256;
    ssl_session_tickets on;
    server {
        listen 127.0.0.1:$ORIGIN_PORT ssl http2 backlog=4096;
        ssl_certificate $RUN/origin.pem;
        ssl_certificate_key $RUN/origin.key;
        location / {
            add_header Cache-Control "max-age=3600";
            return 200 "$BODY";
        }
    }
}
EOF
} >"$RUN/origin.conf"
start_nginx origin taskset -c "$LOAD_CPU"
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"

# ------------------------------------------------------------ proxies
free_port NGINX_PORT
# nginx's cache on tmpfs when there is one (its best setting here: hoard
# stores in memory, and a disk would make this a disk benchmark).
NGINX_CACHE="$RUN/nginx/cache"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    NGINX_CACHE="$(mktemp -d /dev/shm/hoard-bench-nginx.XXXXXX)"
    trap 'rm -rf "$NGINX_CACHE"; cleanup' EXIT
fi
mkdir -p "$NGINX_CACHE"
{
    nginx_common nginx
    cat <<EOF
http {
    access_log off;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
$(nginx_temp_paths nginx)
    proxy_cache_path $NGINX_CACHE levels=1:2 keys_zone=bench:64m
                     max_size=1g inactive=1h use_temp_path=off;
    upstream origin {
        server 127.0.0.1:$ORIGIN_PORT;
        keepalive 256;
        keepalive_requests 10000000;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT backlog=4096;
        location / {
            proxy_pass https://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_ssl_session_reuse on;
            proxy_ssl_server_name on;
            proxy_ssl_name origin.test;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate $RUN/ca.pem;
            proxy_cache bench;
            add_header X-Cache \$upstream_cache_status always;
        }
    }
}
EOF
} >"$RUN/nginx.conf"
start_nginx nginx taskset -c "$PROXY_CPU"
wait_port "$NGINX_PORT" nginx "$STARTED_PID"

free_port HOARD_PORT
spawn "$RUN/hoard.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" \
    --upstream "https://127.0.0.1:$ORIGIN_PORT" --upstream-ca "$RUN/ca.pem" \
    --listen "127.0.0.1:$HOARD_PORT" --threads 1 --cache-size 1GiB
wait_port "$HOARD_PORT" hoard "$STARTED_PID" "$RUN/hoard.log"

# The same hoard with HTTP/2 to the origin (`protocol` has no flag: a file).
free_port HOARD_H2_PORT
cat >"$RUN/hoard-h2.toml" <<TOML
[server]
threads = 1
[[listener]]
address = "127.0.0.1:$HOARD_H2_PORT"
[cache]
memory_size = "1GiB"
[upstream.app]
servers = ["https://127.0.0.1:$ORIGIN_PORT"]
tls = { ca = "$RUN/ca.pem" }
protocol = "h2"
TOML
"$HOARD_BIN" check --config "$RUN/hoard-h2.toml" >"$RUN/hoard-h2.check" 2>&1 \
    || { cat "$RUN/hoard-h2.check" >&2; die "hoard check rejected $RUN/hoard-h2.toml"; }
spawn "$RUN/hoard-h2.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" run --config "$RUN/hoard-h2.toml"
wait_port "$HOARD_H2_PORT" hoard-h2 "$STARTED_PID" "$RUN/hoard-h2.log"

PROXIES=("nginx $NGINX_PORT" "hoard $HOARD_PORT" "hoard-h2 $HOARD_H2_PORT")

# All answer over TLS from the origin, and store.
for p in "${PROXIES[@]}"; do
    set -- $p
    body="$(curl -s "http://127.0.0.1:$2/check-$1")"
    [ "$body" = "$BODY" ] || die "$1 did not fetch the origin's body over TLS"
done

# ------------------------------------------------------------ load
cat >"$RUN/unique.lua" <<'EOF'
local n = 0
local id = 0
function setup(thread) id = id + 1; thread:set("id", id) end
function request()
  n = n + 1
  return wrk.format("GET", "/u/" .. id .. "-" .. math.random(1, 1e9) .. "-" .. n)
end
EOF
wrk_report_lua "$RUN/report.lua"
cat "$RUN/report.lua" >>"$RUN/unique.lua"

measure() { # name port: req/s of unique misses
    local out
    out="$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$RUN/unique.lua" \
        "http://127.0.0.1:$2/" 2>&1)"
    echo "$out" >>"$RUN/wrk-$1.log"
    awk '/^BENCH/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                    if (v["status"] + v["connect"] + v["read"] + v["timeout"] > 0) { print "ERR"; exit }
                    printf "%.0f\n", v["requests"] / (v["duration_us"] / 1e6) }' <<<"$out"
}

origin_conns() { # lines of the origin log so far -> "connections resumed"
    awk '{ if (!($1 in seen)) { seen[$1] = 1; n++; if ($2 == "r") r++ } } END { printf "%d %d\n", n, r }' \
        "$RUN/origin/access.log"
}

flush_origin_log() { kill -USR1 "$(cat "$RUN/origin/nginx.pid")"; sleep 0.5; }

# Warm-up: the first seconds of load run slower for either proxy (page
# cache, allocator, CPU frequency); not measured.
for p in "${PROXIES[@]}"; do
    set -- $p
    taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${WARMUP:-5}s" -s "$RUN/unique.lua" \
        "http://127.0.0.1:$2/" >/dev/null 2>&1 || true
done

declare -A rps conns
for run in $(seq "$RUNS"); do
    for p in "${PROXIES[@]}"; do
        set -- $p
        flush_origin_log
        : >"$RUN/origin/access.log"
        kill -USR1 "$(cat "$RUN/origin/nginx.pid")"
        r="$(measure "$1" "$2")"
        [ "$r" != ERR ] || die "$1: errors under load (see $RUN/wrk-$1.log)"
        flush_origin_log
        read -r c res <<<"$(origin_conns)"
        rps[$1]="${rps[$1]:-} $r"
        conns[$1]="${conns[$1]:-} $c"
        echo "$1 run $run: $r req/s, origin TLS connections $c (resumed $res)" >>"$RUN/summary"
        log "$1 run $run: $r req/s, origin TLS connections $c (resumed $res)"
    done
done

# The origin side of the HTTP/2 question: the same origin, the same
# concurrency (64 requests in flight), fetched over HTTP/1.1 connections
# (what hoard's HTTP/1.1 pool does) and over multiplexed HTTP/2 streams
# (what an h2 upstream does); h2load on the proxies' CPU, which is idle now.
h2cmp() { # label h2load-args...: requests/s
    local label="$1"; shift
    taskset -c "$PROXY_CPU" h2load -D "$DURATION" "$@" "https://127.0.0.1:$ORIGIN_PORT/h2/x" \
        >"$RUN/h2load-$label.log" 2>&1 || die "h2load $* failed (see $RUN/h2load-$label.log)"
    awk '/^finished in/ { gsub(",", ""); for (i = 1; i <= NF; i++) if ($i == "req/s") print $(i - 1) }' \
        "$RUN/h2load-$label.log"
}
H2_H1="$(h2cmp h1 --h1 -c64)"
H2_4="$(h2cmp h2x4 -c4 -m16)"
H2_1="$(h2cmp h2x1 -c1 -m64)"
log "origin alone: HTTP/1.1 x64 $H2_H1 req/s, HTTP/2 4x16 $H2_4, HTTP/2 1x64 $H2_1"

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
h="$(median <<<"${rps[hoard]}")"
h2="$(median <<<"${rps[hoard-h2]}")"
n="$(median <<<"${rps[nginx]}")"
ratio() { awk -v a="$1" -v b="$n" 'BEGIN { printf "%.2fx", a / b }'; }

report_start tls_origin
{
    echo "# Unique misses to an HTTPS origin ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev (built $(hoard_built)), nginx $(nginx -v 2>&1 | sed 's/.*\///')"
    echo "- wrk -t1 -c$CONNS -d${DURATION}s, every request a new URL; median of $RUNS runs; proxies on CPU $PROXY_CPU, origin and wrk on CPU $LOAD_CPU"
    echo
    echo "| proxy | to the origin | unique misses/s | ratio | origin TLS connections per run |"
    echo "|---|---|---|---|---|"
    echo "| hoard | HTTP/1.1 | $h | $(ratio "$h") | ${conns[hoard]# } |"
    echo "| hoard \`protocol = \"h2\"\` | HTTP/2 | $h2 | $(ratio "$h2") | ${conns[hoard-h2]# } |"
    echo "| nginx proxy_cache (keepalive 256, proxy_ssl_session_reuse on) | HTTP/1.1 | $n | 1.00x | ${conns[nginx]# } |"
    echo
    echo "The origin alone (h2load, 64 requests in flight, 1 KiB over TLS): HTTP/1.1 over 64 connections $H2_H1 req/s; HTTP/2 over 4 connections x 16 streams $H2_4 req/s; HTTP/2 over 1 connection x 64 streams $H2_1 req/s."
    echo
    echo "Origin TLS connections per run (distinct connections in the origin's log, and how many resumed a session):"
    echo
    sed 's/^/- /' "$RUN/summary"
} >"$REPORT"
report_done
