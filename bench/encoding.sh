#!/usr/bin/env bash
# Content codings: hits for a 64 KiB HTML page by clients that accept
# "gzip, deflate, br, zstd" through hoard (a br part made once per object)
# against nginx with `gzip on` (level 6, compressing on every request) on
# the same page served as a static file (its fastest path), and against
# hoard's identity hits of an incompressible object as large as the br part
# (the same bytes sent). Also the bytes per response per coding, and the
# first-request latency of a cold compressible object against a cold
# incompressible one. See bench/README.md.
#
# Environment knobs (all optional):
#   DURATION=10 CONNS=64 RUNS=1  wrk runs (the median by req/s is shown)
#   COLD=50                      cold requests timed per kind
#   PROXY_CPU=0 WRK_CPU=1        CPUs of the server under test and of wrk
#   HOARD_BIN, SKIP_BUILD=1, KEEP=1, BASE_PORT=18300
set -euo pipefail

BENCH_NAME=encoding
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
CONNS="${CONNS:-64}"
RUNS="${RUNS:-1}"
COLD="${COLD:-50}"
PROXY_CPU="${PROXY_CPU:-0}"
WRK_CPU="${WRK_CPU:-1}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18300}"
require_whole DURATION
require_whole CONNS
require_whole RUNS
require_whole COLD
require_positive DURATION CONNS RUNS COLD

ensure_tools nginx:nginx-light wrk:wrk curl:curl taskset:util-linux python3:python3
check_cpus PROXY_CPU WRK_CPU "server and wrk"
raise_nofile
NCPU="$(nproc)"
build_hoard
start_run encoding
wrk_report_lua "$RUN/report.lua"
AE="gzip, deflate, br, zstd"

# ----------------------------------------------------------- the files ----
mkdir -p "$RUN/www"
python3 - "$RUN/www" <<'PY'
import os, random, sys
d = sys.argv[1]
html, i = ["<!doctype html><html><head><title>News</title></head><body>\n"], 0
while sum(map(len, html)) < 64 << 10:
    i += 1
    html.append(f'<article id="a{i}"><h2><a href="/news/{i*7919%1000}/{i}">Headline number {i} about topic {i%37}</a></h2>'
                f'<p class="lead">Posted {i*13%600} minutes ago by author {i%11} in section {i%5}.</p></article>\n')
open(os.path.join(d, "page.html"), "w").write("".join(html)[: 64 << 10])
PY

# ------------------------------------------------------------ servers ----
free_port ORIGIN_PORT
free_port GZIP_PORT
free_port HOARD_PORT
{
    nginx_common origin
    cat <<NGX
http {
    access_log off;
    types { text/html html; application/octet-stream bin; }
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 10000000;
    $(nginx_temp_paths origin)
    server {
        listen 127.0.0.1:$ORIGIN_PORT;
        root $RUN/www;
        add_header Cache-Control "max-age=3600";
        etag on;
    }
}
NGX
} >"$RUN/origin.conf"
start_nginx origin taskset -c "$WRK_CPU"
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"

# nginx as its users compress: gzip on, level 6, on every response.
{
    nginx_common gzip
    cat <<NGX
http {
    access_log off;
    types { text/html html; }
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 10000000;
    open_file_cache max=64 inactive=60s;
    gzip on;
    gzip_comp_level 6;
    gzip_types text/html;
    gzip_vary on;
    $(nginx_temp_paths gzip)
    server {
        listen 127.0.0.1:$GZIP_PORT backlog=4096;
        root $RUN/www;
    }
}
NGX
} >"$RUN/gzip.conf"
start_nginx gzip taskset -c "$PROXY_CPU"
wait_port "$GZIP_PORT" nginx-gzip "$STARTED_PID"

spawn "$RUN/hoard.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" --upstream "http://127.0.0.1:$ORIGIN_PORT" \
    --listen "127.0.0.1:$HOARD_PORT" --threads 1
HOARD_PID="$STARTED_PID"
wait_port "$HOARD_PORT" hoard "$HOARD_PID" "$RUN/hoard.log"

size_of() { # URL [AE]: bytes of the body
    curl -sS -o /dev/null -w '%{size_download}' ${2:+-H "Accept-Encoding: $2"} "$1"
}
# Warm hoard (and let it make the parts).
size_of "http://127.0.0.1:$HOARD_PORT/page.html" >/dev/null
sleep 2
declare -A SIZE
for c in identity gzip br zstd; do
    SIZE[$c]="$(size_of "http://127.0.0.1:$HOARD_PORT/page.html" "$c")"
done
SIZE[nginx]="$(size_of "http://127.0.0.1:$GZIP_PORT/page.html" "$AE")"
log "sizes: identity ${SIZE[identity]} gzip ${SIZE[gzip]} br ${SIZE[br]} zstd ${SIZE[zstd]}; nginx gzip ${SIZE[nginx]}"
# An incompressible object as large as the br part, for identity hits.
head -c "${SIZE[br]}" /dev/urandom >"$RUN/www/same.bin"
size_of "http://127.0.0.1:$HOARD_PORT/same.bin" >/dev/null

run_wrk() { # NAME URL [AE]: RUNS runs, the median by req/s; prints req/s and p99 ms and CPU ms/1k req
    local name="$1" url="$2" ae="${3:-}" i out rps results=()
    for i in $(seq "$RUNS"); do
        local before after
        before="$(sys_busy)"
        if [ -n "$ae" ]; then
            out="$(taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" -H "Accept-Encoding: $ae" -s "$RUN/report.lua" "$url" | grep '^BENCH')"
        else
            out="$(taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$RUN/report.lua" "$url" | grep '^BENCH')"
        fi
        after="$(sys_busy)"
        rps="$(awk -v r="$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<<"$out")" -v d="$(sed -n 's/.*duration_us=\([0-9]*\).*/\1/p' <<<"$out")" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
        results+=("$rps $(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$out") $(( after - before )) $(sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<<"$out")")
        log "$name run $i: $rps req/s"
    done
    printf '%s\n' "${results[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p"
}
declare -A R
R[hoard_br]="$(run_wrk hoard-br "http://127.0.0.1:$HOARD_PORT/page.html" "$AE")"
R[nginx_gzip]="$(run_wrk nginx-gzip "http://127.0.0.1:$GZIP_PORT/page.html" "$AE")"
R[hoard_same]="$(run_wrk hoard-identity-same-bytes "http://127.0.0.1:$HOARD_PORT/same.bin")"
R[hoard_identity]="$(run_wrk hoard-identity-64k "http://127.0.0.1:$HOARD_PORT/page.html")"

# ------------------------------------------------- first-request latency ----
cold() { # PATH AE: mean ms to the last byte of COLD cold requests
    local i t sum=0
    for i in $(seq "$COLD"); do
        t="$(curl -sS -o /dev/null -w '%{time_total}' -H "Accept-Encoding: $2" "http://127.0.0.1:$HOARD_PORT$1?cold=$i-$RANDOM")"
        sum="$(awk -v a="$sum" -v b="$t" 'BEGIN { print a + b }')"
    done
    awk -v s="$sum" -v n="$COLD" 'BEGIN { printf "%.2f", 1000 * s / n }'
}
head -c 65536 /dev/urandom >"$RUN/www/cold.bin"
R[cold_html]="$(cold /page.html "$AE")"
R[cold_bin]="$(cold /cold.bin "$AE")"

report_start encoding
f() { awk -v v="$1" -v k="$2" 'BEGIN { split(v, a, " "); print a[k] }'; }
cpu_per_k() { awk -v t="$(f "$1" 3)" -v n="$(f "$1" 4)" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", n ? 1000 * (t / hz) * 1000 / n : 0 }'; }
{
    echo "# content codings ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev --threads 1 on CPU $PROXY_CPU; nginx $(nginx -v 2>&1 | sed 's/.*\///') one worker on CPU $PROXY_CPU; wrk -t1 -c$CONNS ${DURATION}s on CPU $WRK_CPU; median of $RUNS"
    echo
    echo "| 64 KiB HTML page, Accept-Encoding: $AE | req/s | ratio | p99 ms | CPU ms per 1k requests (whole machine) | bytes per response |"
    echo "|---|---|---|---|---|---|"
    echo "| hoard, br part made once | $(f "${R[hoard_br]}" 1) | **$(awk -v a="$(f "${R[hoard_br]}" 1)" -v b="$(f "${R[nginx_gzip]}" 1)" 'BEGIN { printf "%.2fx", a / b }')** nginx | $(awk -v u="$(f "${R[hoard_br]}" 2)" 'BEGIN { printf "%.2f", u / 1000 }') | $(cpu_per_k "${R[hoard_br]}") | ${SIZE[br]} |"
    echo "| nginx, gzip on, level 6 (per request) | $(f "${R[nginx_gzip]}" 1) | 1.00 | $(awk -v u="$(f "${R[nginx_gzip]}" 2)" 'BEGIN { printf "%.2f", u / 1000 }') | $(cpu_per_k "${R[nginx_gzip]}") | ${SIZE[nginx]} |"
    echo "| hoard, identity hit of ${SIZE[br]} incompressible bytes (the same bytes sent) | $(f "${R[hoard_same]}" 1) | $(awk -v a="$(f "${R[hoard_br]}" 1)" -v b="$(f "${R[hoard_same]}" 1)" 'BEGIN { printf "br at %.2fx of it", a / b }') | $(awk -v u="$(f "${R[hoard_same]}" 2)" 'BEGIN { printf "%.2f", u / 1000 }') | $(cpu_per_k "${R[hoard_same]}") | ${SIZE[br]} |"
    echo "| hoard, identity hit of the page (no Accept-Encoding) | $(f "${R[hoard_identity]}" 1) | | $(awk -v u="$(f "${R[hoard_identity]}" 2)" 'BEGIN { printf "%.2f", u / 1000 }') | $(cpu_per_k "${R[hoard_identity]}") | ${SIZE[identity]} |"
    echo
    echo "| coding | bytes | of identity |"
    echo "|---|---|---|"
    for c in identity br zstd gzip; do
        echo "| $c | ${SIZE[$c]} | $(awk -v a="${SIZE[$c]}" -v b="${SIZE[identity]}" 'BEGIN { printf "%.1f %%", 100 * a / b }') |"
    done
    echo "| nginx gzip level 6 | ${SIZE[nginx]} | $(awk -v a="${SIZE[nginx]}" -v b="${SIZE[identity]}" 'BEGIN { printf "%.1f %%", 100 * a / b }') |"
    echo
    echo "First request of a cold 64 KiB object through hoard (mean of $COLD, curl to the last byte): compressible HTML ${R[cold_html]} ms, incompressible ${R[cold_bin]} ms (the first client streams what the origin sends; the parts are made after)."
} >"$REPORT"
report_done
