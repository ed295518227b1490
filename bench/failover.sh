#!/usr/bin/env bash
# Failover: an upstream of two servers, the first a dead port (nothing
# listens: connections are refused), the second a live origin (nginx
# answering 200 with `Cache-Control: no-store`, so every request reaches
# it). hoard and nginx (`upstream { server dead; server live; }`, its
# defaults: `proxy_next_upstream error timeout`, `max_fails=1`) run in the
# same run, each with an origin port of its own. N sequential GETs (one
# curl, one keep-alive connection), then N GETs CONCURRENT at a time
# (`curl --parallel`), to each proxy: errors (any status but 200) out of N,
# and the requests each origin saw (exactly N each: nothing sent twice).
#
#   bench/failover.sh                      # N=100, CONCURRENT=16
#   N=40 bench/failover.sh
#   HOARD_BEFORE=/path/to/old/hoard bench/failover.sh   # an older hoard too
#
# Knobs: N (100), CONCURRENT (16), BASE_PORT (19380), HOARD_BIN,
# SKIP_BUILD=1, KEEP=1. HOARD_BEFORE: another hoard binary measured the same
# way (for example one without failover).
set -euo pipefail
BENCH_NAME=failover
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N="${N:-100}"
CONCURRENT="${CONCURRENT:-16}"
NEXT_PORT="${BASE_PORT:-19380}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
HOARD_BEFORE="${HOARD_BEFORE:-}"
SKIP_BUILD="${SKIP_BUILD:-0}"
KEEP="${KEEP:-0}"
require_positive N CONCURRENT

ensure_tools nginx:nginx-light curl:curl
NCPU="$(nproc)"
raise_nofile
build_hoard
[ -z "$HOARD_BEFORE" ] || [ -x "$HOARD_BEFORE" ] || die "HOARD_BEFORE: no binary at $HOARD_BEFORE"
start_run failover

PROXIES="nginx hoard"
[ -z "$HOARD_BEFORE" ] || PROXIES="$PROXIES hoard-before"

# ------------------------------------------------------------ origin
# One origin nginx, a port (and a log to count requests) per proxy.
free_port DEAD_PORT # nothing ever listens here
declare -A ORIGIN PORT
servers=""
for p in $PROXIES; do
    free_port "ORIGIN[$p]"
    servers+="    server {
        listen 127.0.0.1:${ORIGIN[$p]};
        access_log $RUN/origin/$p.log;
        location / { add_header Cache-Control no-store; return 200 \"ok\\n\"; }
    }
"
done
{
    nginx_common origin
    cat <<EOF
http {
$(nginx_temp_paths origin)
$servers
}
EOF
} >"$RUN/origin.conf"
start_nginx origin
ORIGIN_PID="$STARTED_PID"
wait_port "${ORIGIN[nginx]}" origin "$ORIGIN_PID"

# ------------------------------------------------------------ proxies
# Started afresh for each phase: neither begins knowing the dead server.
declare -A PID
start_nginx_proxy() {
    free_port "PORT[nginx]"
    {
        nginx_common nginx
        cat <<EOF
http {
    access_log off;
$(nginx_temp_paths nginx)
    upstream app {
        server 127.0.0.1:$DEAD_PORT;
        server 127.0.0.1:${ORIGIN[nginx]};
        keepalive 32;
    }
    server {
        listen 127.0.0.1:${PORT[nginx]} backlog=4096;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
    } >"$RUN/nginx.conf"
    start_nginx nginx
    PID[nginx]="$STARTED_PID"
    wait_port "${PORT[nginx]}" nginx "$STARTED_PID"
}

start_hoard() { # name binary
    local name="$1" bin="$2"
    free_port "PORT[$name]"
    mkdir -p "$RUN/$name"
    cat >"$RUN/$name/hoard.toml" <<EOF
[server]
threads = 1
[[listener]]
address = "127.0.0.1:${PORT[$name]}"
[upstream.app]
servers = ["http://127.0.0.1:$DEAD_PORT", "http://127.0.0.1:${ORIGIN[$name]}"]
EOF
    "$bin" check --config "$RUN/$name/hoard.toml" >/dev/null
    spawn "$RUN/$name/stderr.log" "$bin" run --config "$RUN/$name/hoard.toml"
    PID[$name]="$STARTED_PID"
    wait_port "${PORT[$name]}" "$name" "$STARTED_PID" "$RUN/$name/stderr.log"
}

start_proxy() { # name
    case "$1" in
        nginx) start_nginx_proxy ;;
        hoard) start_hoard hoard "$HOARD_BIN" ;;
        hoard-before) start_hoard hoard-before "$HOARD_BEFORE" ;;
    esac
}

# ------------------------------------------------------------ load
urls() { # port phase: N distinct URLs, in a curl config file
    local i
    for ((i = 0; i < N; i++)); do
        printf 'url = "http://127.0.0.1:%s/%s/%d"\noutput = "/dev/null"\n' "$1" "$2" "$i"
    done
}

# run name phase [curl options...]: prints "errors origin_requests"
run() {
    local name="$1" phase="$2" before after codes errors
    shift 2
    urls "${PORT[$name]}" "$phase" >"$RUN/$name.$phase.urls"
    before="$(wc -l <"$RUN/origin/$name.log")"
    codes="$(curl -s -w '%{http_code}\n' --max-time 30 "$@" -K "$RUN/$name.$phase.urls" \
        2>>"$RUN/curl.log" || true)"
    echo "$codes" >"$RUN/$name.$phase.codes"
    errors="$((N - $(grep -c '^200$' <<<"$codes" || true)))"
    # nginx writes its access log line after the response: let it catch up.
    for _ in $(seq 20); do
        after="$(wc -l <"$RUN/origin/$name.log")"
        [ "$((after - before))" -ge "$((N - errors))" ] && break
        sleep 0.05
    done
    echo "$errors $((after - before))"
}

declare -A RES
for p in $PROXIES; do
    start_proxy "$p"
    RES[$p-seq]="$(run "$p" seq)"
    log "$p, $N sequential: errors, origin requests: ${RES[$p-seq]}"
    stop_pid "${PID[$p]}"
    start_proxy "$p"
    RES[$p-par]="$(run "$p" par --parallel --parallel-immediate --parallel-max "$CONCURRENT")"
    log "$p, $N by $CONCURRENT: errors, origin requests: ${RES[$p-par]}"
    stop_pid "${PID[$p]}"
done

report_start failover
{
    echo "# Failover: one dead server, one live ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev (built $(hoard_built), $HOARD_BIN), nginx $(nginx -v 2>&1 | sed 's/.*\///')"
    echo "- upstream: 127.0.0.1:$DEAD_PORT (refuses) then the live origin; every proxy with its defaults, started afresh for each column"
    echo
    echo "| proxy | $N sequential: errors | origin saw | $N, $CONCURRENT at a time: errors | origin saw |"
    echo "|---|---|---|---|---|"
    for p in $PROXIES; do
        read -r se so <<<"${RES[$p-seq]}"
        read -r pe po <<<"${RES[$p-par]}"
        echo "| $p | $se of $N | $so | $pe of $N | $po |"
    done
} >"$REPORT"
report_done
