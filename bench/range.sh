#!/usr/bin/env bash
# Range benchmark: cold and repeated ranges of a large object from a slow
# origin, and a player-like sequence of seeks; hoard (whole-object fills and
# slice mode) vs. nginx proxy_cache (default, proxy_cache_lock, slice 1m).
#
# The origin (bench/range_origin.py) sends every connection at RATE bytes/s
# and counts the body bytes it writes. Two scenarios, each on a fresh object:
#
#   repeat  bytes 5000000-5000009 of a 10 MB object, cold, then the same
#           range every 0.5 s for 10 s: time of the first response and of
#           the slowest later one, origin requests and bytes
#   seeks   20 seeks over a 200 MB object, 512 KiB read at each: slowest and
#           median seek, origin bytes (slicing proxies only: a whole-object
#           fill of 200 MB at 1 MB/s takes minutes)
#
# Knobs (environment):
#   PROXIES="nginx nginx-lock nginx-slice nginx-slice256 hoard hoard-slice hoard-slice256"
#   RATE=1000000       origin bytes per second per connection
#   PROXY_CPU=0 CLIENT_CPU=1   proxy on one CPU, origin and client on the other
#   BASE_PORT=19080 HOARD_BIN=... SKIP_BUILD=1 KEEP=1
set -euo pipefail
BENCH_NAME=range
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROXIES="${PROXIES:-nginx nginx-lock nginx-slice nginx-slice256 hoard hoard-slice hoard-slice256}"
RATE="${RATE:-1000000}"
PROXY_CPU="${PROXY_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
NEXT_PORT="${BASE_PORT:-19080}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
SKIP_BUILD="${SKIP_BUILD:-0}"
KEEP="${KEEP:-0}"
DISK_MB=4096
require_whole RATE
require_positive RATE
for p in $PROXIES; do
    case "$p" in nginx|nginx-lock|nginx-slice|nginx-slice256|hoard|hoard-slice|hoard-slice256) ;; *) die "unknown proxy '$p' in PROXIES" ;; esac
done

ensure_tools nginx:nginx-light python3:python3 curl:curl taskset:util-linux
check_cpus PROXY_CPU CLIENT_CPU "proxy and client"
raise_nofile
[[ " $PROXIES " != *" hoard"* ]] || build_hoard
start_run range

free_port ORIGIN_PORT
spawn "$RUN/origin.log" taskset -c "$CLIENT_CPU" python3 "$BENCH_DIR/range_origin.py" --port "$ORIGIN_PORT" --rate "$RATE"
wait_port "$ORIGIN_PORT" origin "$STARTED_PID" "$RUN/origin.log"
log "origin on 127.0.0.1:$ORIGIN_PORT at $RATE B/s per connection"

nginx_range_conf() { # name port mode: mode is default, lock, slice or slice256
    local name="$1" port="$2" mode="$3" extra=""
    case "$mode" in
        slice256) extra='slice 256k; proxy_cache_key $uri$is_args$args$slice_range; proxy_set_header Range $slice_range; proxy_cache_valid 200 206 1h;' ;;
        lock) extra="proxy_cache_lock on; proxy_cache_lock_timeout 60s; proxy_cache_lock_age 60s;" ;;
        slice) extra='slice 1m; proxy_cache_key $uri$is_args$args$slice_range; proxy_set_header Range $slice_range; proxy_cache_valid 200 206 1h;' ;;
    esac
    mkdir -p "$RUN/$name/cache"
    nginx_common "$name"
    cat <<EOF
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
$(nginx_temp_paths "$name")
    proxy_cache_path $RUN/$name/cache levels=1:2 keys_zone=$name:64m
                     max_size=${DISK_MB}m inactive=1h use_temp_path=off;
    upstream origin {
        server 127.0.0.1:$ORIGIN_PORT;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache $name;
            proxy_read_timeout 600s;
            $extra
            add_header X-Cache \$upstream_cache_status always;
        }
    }
}
EOF
}

declare -A PORT PID
start_hoard() { # name port args...: sets PORT[name], PID[name]
    local name="$1" port="$2"; shift 2
    mkdir -p "$RUN/$name"
    spawn "$RUN/$name/stdout.log" env HOARD_LOG=info taskset -c "$PROXY_CPU" "$HOARD_BIN" "$@"
    wait_port "$port" "$name" "$STARTED_PID" "$RUN/$name/stdout.log"
    PORT[$name]="$port"; PID[$name]="$STARTED_PID"
}

start_proxy() { # name: sets PORT[name], PID[name]
    local name="$1" port
    free_port port
    case "$name" in
        nginx|nginx-lock|nginx-slice|nginx-slice256)
            local mode=default
            [ "$name" = nginx ] || mode="${name#nginx-}"
            nginx_range_conf "$name" "$port" "$mode" >"$RUN/$name.conf"
            start_nginx "$name" taskset -c "$PROXY_CPU"
            wait_port "$port" "$name" "$STARTED_PID" "$RUN/$name/error.log"
            PORT[$name]="$port"; PID[$name]="$STARTED_PID"
            ;;
        hoard)
            start_hoard "$name" "$port" --upstream "http://127.0.0.1:$ORIGIN_PORT" --listen "127.0.0.1:$port" \
                --threads 1 --cache-size 1GiB --max-object-size 256MiB
            ;;
        hoard-slice)
            start_hoard "$name" "$port" --upstream "http://127.0.0.1:$ORIGIN_PORT" --listen "127.0.0.1:$port" \
                --threads 1 --cache-size 1GiB --slice 1MiB
            ;;
        hoard-slice256)
            start_hoard "$name" "$port" --upstream "http://127.0.0.1:$ORIGIN_PORT" --listen "127.0.0.1:$port" \
                --threads 1 --cache-size 1GiB --slice 256KiB
            ;;
    esac
}

origin_stats() { curl -fsS "http://127.0.0.1:$ORIGIN_PORT/__stats"; }
settle() { # wait until the origin has written nothing for 2 s (prefetches, background fills)
    local a b
    a="$(origin_stats)"
    while sleep 2; b="$(origin_stats)"; [ "$a" != "$b" ]; do a="$b"; done
    echo "$b"
}
client() { taskset -c "$CLIENT_CPU" python3 "$BENCH_DIR/range_client.py" "$@"; }
field() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d[sys.argv[2]])' "$1" "$2"; }
stat_of() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" <<<"$1"; }

report_start range
{
    echo "# Ranges from a slow origin: hoard vs. nginx"
    echo
    machine_line
    echo "- origin: $RATE bytes/s per connection (bench/range_origin.py); git $git_rev"
    echo "- repeat: bytes 5000000-5000009 of a 10 MB object, cold, then every 0.5 s for 10 s"
    echo "- seeks: 20 seeks over a 200 MB object, 512 KiB read at each"
    echo "- nginx-slice: \`slice 1m\`; nginx-slice256: \`slice 256k\`; hoard-slice: \`--slice 1MiB\`; hoard-slice256: \`--slice 256KiB\` (both with the default prefetch of 1 slice)"
    echo
    echo "| proxy | first response | slowest later | origin requests | origin MB | bytes ok |"
    echo "|---|---|---|---|---|---|"
} >"$REPORT"
declare -A SEEK
for p in $PROXIES; do
    start_proxy "$p"
    curl -fsS "http://127.0.0.1:$ORIGIN_PORT/__reset" >/dev/null
    out="$(client repeat "http://127.0.0.1:${PORT[$p]}/obj/10000000/repeat-$p" 5000000 5000009)"
    echo "$out" >"$RUN/$p-repeat.json"
    s="$(settle)"
    printf '| %s | %s ms | %s ms | %s | %.2f | %s |\n' "$p" "$(field "$out" first_ms)" "$(field "$out" later_max_ms)" \
        "$(stat_of "$s" requests)" "$(echo "$(stat_of "$s" bytes) / 1000000" | bc -l)" "$(field "$out" all_ok)" >>"$REPORT"
    log "$p repeat: first $(field "$out" first_ms) ms, slowest later $(field "$out" later_max_ms) ms, origin $s"
    if [[ "$p" == *slice* ]]; then
        curl -fsS "http://127.0.0.1:$ORIGIN_PORT/__reset" >/dev/null
        out="$(client seeks "http://127.0.0.1:${PORT[$p]}/obj/200000000/seeks-$p" 200000000)"
        echo "$out" >"$RUN/$p-seeks.json"
        s="$(settle)"
        SEEK[$p]="$(printf '| %s | %s ms | %s ms | %s | %.2f | %s |' "$p" "$(field "$out" slowest_ms)" "$(field "$out" median_ms)" \
            "$(stat_of "$s" requests)" "$(echo "$(stat_of "$s" bytes) / 1000000" | bc -l)" "$(field "$out" all_ok)")"
        log "$p seeks: slowest $(field "$out" slowest_ms) ms, origin $s"
    fi
    stop_pid "${PID[$p]}"
done
if [ "${#SEEK[@]}" -gt 0 ]; then
    {
        echo
        echo "| proxy (seeks) | slowest seek | median seek | origin requests | origin MB | bytes ok |"
        echo "|---|---|---|---|---|---|"
        for p in $PROXIES; do [ -z "${SEEK[$p]:-}" ] || echo "${SEEK[$p]}"; done
    } >>"$REPORT"
fi
report_done
