#!/usr/bin/env bash
# Reload under load: wrk measures 1 KiB cache hits for DURATION seconds
# while the configuration is reloaded every second (SIGHUP; the file
# alternates between two lifetimes), against the same run without reloads.
# The same for nginx proxy_cache (SIGHUP to its master: new workers, old
# ones drain). Reported: req/s, p99, wrk errors, the ratio to the run
# without reloads, and how many reloads were applied.
#
# Environment knobs (all optional):
#   DURATION=30        seconds per wrk run
#   CONNS=64           wrk connections
#   PROXIES="hoard nginx"
#   PROXY_CPU=0 WRK_CPU=1
#   HOARD_BIN=path SKIP_BUILD=1 KEEP=1 BASE_PORT=18080   as in hit.sh
set -euo pipefail

BENCH_NAME=reload
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-30}"
CONNS="${CONNS:-64}"
PROXIES="${PROXIES:-hoard nginx}"
PROXY_CPU="${PROXY_CPU:-0}"
WRK_CPU="${WRK_CPU:-1}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18080}"

require_whole DURATION "a whole number of seconds"
require_whole CONNS
require_positive DURATION CONNS

ensure_tools nginx:nginx-light wrk:wrk curl:curl taskset:util-linux
check_cpus PROXY_CPU WRK_CPU "proxy and wrk"
raise_nofile
if has "$PROXIES" hoard; then build_hoard; fi

start_run run
free_port ORIGIN_PORT
free_port NGINX_PORT
free_port HOARD_PORT

DOCROOT="$RUN/www"
mkdir -p "$DOCROOT"
head -c 1024 /dev/urandom >"$DOCROOT/1k.bin"
{
    nginx_common origin
    cat <<EOF
http {
    access_log off;
    default_type application/octet-stream;
    keepalive_requests 10000000;
$(nginx_temp_paths origin)
    server {
        listen 127.0.0.1:$ORIGIN_PORT;
        root $DOCROOT;
        location / { expires 1h; }
    }
}
EOF
} >"$RUN/origin.conf"
start_nginx origin
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"

declare -A PORT MASTER
hoard_config() { # ttl: the hoard configuration with this default lifetime
    cat <<EOF
[server]
threads = 1
[[listener]]
address = "127.0.0.1:$HOARD_PORT"
[cache]
memory_size = "256MiB"
[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN_PORT"]
[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
default_ttl = { "200" = "$1" }
EOF
}
if has "$PROXIES" hoard; then
    mkdir -p "$RUN/hoard"
    hoard_config 1h >"$RUN/hoard/hoard.toml"
    "$HOARD_BIN" check --config "$RUN/hoard/hoard.toml" >/dev/null
    spawn "$RUN/hoard/stderr.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" run \
        --config "$RUN/hoard/hoard.toml" --pid-file "$RUN/hoard/hoard.pid"
    wait_port "$HOARD_PORT" hoard "$STARTED_PID" "$RUN/hoard/stderr.log"
    PORT[hoard]="$HOARD_PORT"
    MASTER[hoard]="$STARTED_PID"
fi
if has "$PROXIES" nginx; then
    start_nginx_proxy_cache nginx "$NGINX_PORT" "access_log off;"
    PORT[nginx]="$NGINX_PORT"
    MASTER[nginx]="$NGINX_MASTER"
fi
for p in $PROXIES; do
    for _ in 1 2; do
        curl -sS --fail -o /dev/null "http://127.0.0.1:${PORT[$p]}/1k.bin" || die "$p: warm-up failed"
    done
done

wrk_report_lua "$RUN/report.lua"
declare -A RPS P99 ERR RELOADS

reloader() { # proxy: every second, change the configuration and send SIGHUP
    local p="$1" i=0
    while :; do
        sleep 1
        i=$((i + 1))
        if [ "$p" = hoard ]; then
            hoard_config "$((3600 + i % 2))s" >"$RUN/hoard/hoard.toml.new"
            mv "$RUN/hoard/hoard.toml.new" "$RUN/hoard/hoard.toml"
            "$HOARD_BIN" reload --pid-file "$RUN/hoard/hoard.pid" >/dev/null
        else
            kill -HUP "${MASTER[nginx]}"
        fi
        echo "$i" >"$RUN/$p.reloads"
    done
}

measure() { # proxy mode(plain|reload)
    local p="$1" m="$2" k="$1-$2" f="$RUN/$1-$2" rpid="" line
    log "$p ($m): wrk -t1 -c$CONNS -d${DURATION}s"
    echo 0 >"$RUN/$p.reloads"
    if [ "$m" = reload ]; then
        reloader "$p" &
        rpid=$!
    fi
    taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency \
        -s "$RUN/report.lua" "http://127.0.0.1:${PORT[$p]}/1k.bin" >"$f.wrk" 2>&1 \
        || { cat "$f.wrk" >&2; die "wrk failed"; }
    if [ -n "$rpid" ]; then kill "$rpid"; wait "$rpid" 2>/dev/null || true; fi
    RELOADS[$k]="$(cat "$RUN/$p.reloads")"
    line="$(grep '^BENCH ' "$f.wrk")"
    get() { sed -E "s/.* $1=([0-9]+).*/\1/" <<<" ${line#BENCH }"; }
    RPS[$k]="$(awk -v r="$(get requests)" -v d="$(get duration_us)" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
    P99[$k]="$(awk -v v="$(get p99_us)" 'BEGIN { printf "%.2f", v / 1000 }')"
    ERR[$k]=$(( $(get connect) + $(get read) + $(get write) + $(get status) + $(get timeout) ))
}

for p in $PROXIES; do
    measure "$p" plain
    measure "$p" reload
done
if has "$PROXIES" hoard; then
    applied="$(grep -c 'configuration reloaded' "$RUN/hoard/stderr.log" || true)"
fi

report_start reload
{
    echo "# reload under load ($STAMP)"
    echo
    machine_line
    echo "- hoard $git_rev; wrk -t1 -c$CONNS -d${DURATION}s on 1 KiB hits; proxy on CPU $PROXY_CPU (one thread / one worker), wrk on CPU $WRK_CPU"
    echo "- reloads: one per second during the reload run (hoard: the file alternates between two lifetimes, \`hoard reload\`; nginx: SIGHUP to the master)"
    echo
    echo "| proxy | req/s plain | req/s reloading | ratio | p99 plain | p99 reloading | wrk errors | reloads sent |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for p in $PROXIES; do
        echo "| $p | ${RPS[$p-plain]} | ${RPS[$p-reload]} | $(awk -v a="${RPS[$p-reload]}" -v b="${RPS[$p-plain]}" 'BEGIN { printf "%.3f", a / b }') | ${P99[$p-plain]} ms | ${P99[$p-reload]} ms | ${ERR[$p-plain]} / ${ERR[$p-reload]} | ${RELOADS[$p-reload]} |"
    done
    if has "$PROXIES" hoard; then
        echo
        echo "hoard logged $applied applied reloads (\`configuration reloaded\`)."
    fi
} >"$REPORT"
report_done
