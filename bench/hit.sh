#!/usr/bin/env bash
# Cache-hit throughput benchmark: hoard vs. nginx proxy_cache.
#
# Both proxies sit in front of the same nginx origin, are pinned to one CPU
# and are driven by wrk on another CPU.  Every measured request is a cache
# hit, so the numbers show the cost of the hit path alone.  See
# bench/README.md for how to read the output.
#
# Environment knobs (all optional):
#   DURATION=10        seconds per wrk run
#   CONNS=64           wrk connections
#   RUNS=1             runs per proxy and object; the median run (by req/s) is shown
#   PROXIES="nginx hoard"   which proxies to run (e.g. PROXIES=nginx); add
#                      hoard-filter for hoard with one Proxy-Wasm filter that
#                      adds a response field (examples/filters/stamp.wat)
#   OBJECTS="1k 64k"   which objects to fetch
#   PROXY_CPU=0 WRK_CPU=1   CPUs used for the proxy under test and for wrk
#   HOARD_BIN=path     use this binary instead of building target/release/hoard
#   SKIP_BUILD=1       do not run cargo build (HOARD_BIN or an existing binary)
#   KEEP=1             keep bench/out/run.* (configs, logs, raw wrk output)
#   BASE_PORT=18080    first loopback port to try (origin, nginx, hoard)
set -euo pipefail

BENCH_NAME=hit
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
CONNS="${CONNS:-64}"
RUNS="${RUNS:-1}"
PROXIES="${PROXIES:-nginx hoard}"
OBJECTS="${OBJECTS:-1k 64k}"
PROXY_CPU="${PROXY_CPU:-0}"
WRK_CPU="${WRK_CPU:-1}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"

NEXT_PORT="${BASE_PORT:-18080}"

require_whole DURATION "a whole number of seconds"
require_whole CONNS
require_whole RUNS
require_positive DURATION CONNS RUNS

# ---------------------------------------------------------------- tools ----
ensure_tools nginx:nginx-light wrk:wrk perf:linux-perf curl:curl taskset:util-linux

check_cpus PROXY_CPU WRK_CPU "proxy and wrk"

# Hardware instruction counters are often missing inside VMs/containers.
PERF_OK=0
if perf stat -x, -e instructions true 2>&1 >/dev/null | grep -Eq '^[0-9]+,[^,]*,instructions'; then
    PERF_OK=1
else
    log "instructions: n/a (perf counters unsupported)"
fi

raise_nofile

# ---------------------------------------------------------------- build ----
want_hoard=0
for p in $PROXIES; do
    case "$p" in
        hoard|hoard-filter) want_hoard=1 ;;
        nginx) ;;
        *) die "unknown proxy '$p' in PROXIES" ;;
    esac
done
[ "$want_hoard" -eq 0 ] || build_hoard

# ------------------------------------------------------------- work dir ----
start_run run

free_port ORIGIN_PORT
free_port NGINX_PORT
free_port HOARD_PORT

# --------------------------------------------------------------- origin ----
DOCROOT="$RUN/www"
mkdir -p "$DOCROOT"
declare -A OBJ_SIZE=([1k]=1024 [64k]=65536)
for o in $OBJECTS; do
    [ -n "${OBJ_SIZE[$o]:-}" ] || die "unknown object '$o' (known: ${!OBJ_SIZE[*]})"
done
for o in "${!OBJ_SIZE[@]}"; do
    head -c "${OBJ_SIZE[$o]}" /dev/urandom >"$DOCROOT/$o.bin"
done

{
    nginx_common origin
    cat <<EOF
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 10000000;
$(nginx_temp_paths origin)
    server {
        listen 127.0.0.1:$ORIGIN_PORT;
        root $DOCROOT;
        location / {
            expires 1h;
        }
    }
}
EOF
} >"$RUN/origin.conf"

log "origin nginx on 127.0.0.1:$ORIGIN_PORT"
start_nginx origin
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"
for o in $OBJECTS; do
    hdr="$(curl -sS -o /dev/null -D - "http://127.0.0.1:$ORIGIN_PORT/$o.bin")"
    grep -qi '^cache-control: *max-age=3600' <<<"$hdr" \
        || die "origin does not send Cache-Control: max-age=3600 for /$o.bin"
done

# ---------------------------------------------------------------- proxies ----
declare -A PROXY_PORT PROXY_PID

if has "$PROXIES" nginx; then
    log "nginx proxy_cache on 127.0.0.1:$NGINX_PORT (CPU $PROXY_CPU)"
    start_nginx_proxy_cache nginx "$NGINX_PORT" "access_log off;"
    PROXY_PORT[nginx]="$NGINX_PORT"
    PROXY_PID[nginx]="$NGINX_WORKER"
fi

if has "$PROXIES" hoard; then
    mkdir -p "$RUN/hoard"
    log "hoard on 127.0.0.1:$HOARD_PORT (CPU $PROXY_CPU, --threads 1)"
    spawn "$RUN/hoard/stdout.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" \
        --upstream "http://127.0.0.1:$ORIGIN_PORT" \
        --listen "127.0.0.1:$HOARD_PORT" \
        --cache-size 256MiB \
        --threads 1
    wait_port "$HOARD_PORT" hoard "$STARTED_PID" "$RUN/hoard/stdout.log"
    PROXY_PORT[hoard]="$HOARD_PORT"
    PROXY_PID[hoard]="$STARTED_PID"
fi

if has "$PROXIES" hoard-filter; then
    free_port FILTER_PORT
    mkdir -p "$RUN/hoard-filter"
    cat >"$RUN/hoard-filter/hoard.toml" <<EOF
[server]
threads = 1
[cache]
memory_size = "256MiB"
[[listener]]
address = "127.0.0.1:$FILTER_PORT"
[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN_PORT"]
[filter.stamp]
wasm = "$ROOT/examples/filters/stamp.wat"
config = "edge-7"
[[site]]
[[site.route]]
prefix = "/"
filters = ["stamp"]
EOF
    log "hoard with one filter on 127.0.0.1:$FILTER_PORT (CPU $PROXY_CPU, 1 thread)"
    spawn "$RUN/hoard-filter/stdout.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" \
        run --config "$RUN/hoard-filter/hoard.toml"
    wait_port "$FILTER_PORT" hoard-filter "$STARTED_PID" "$RUN/hoard-filter/stdout.log"
    PROXY_PORT[hoard-filter]="$FILTER_PORT"
    PROXY_PID[hoard-filter]="$STARTED_PID"
fi

# ---------------------------------------------------------------- warm-up ----
is_hit() { # proxy headers
    case "$1" in
        nginx) grep -Eqi '^x-cache: *hit' <<<"$2" ;;
        hoard) grep -Eqi '^cache-status:.*hoard; *hit' <<<"$2" ;;
        hoard-filter) grep -Eqi '^cache-status:.*hoard; *hit' <<<"$2" && grep -Eqi '^x-filter: *edge-7' <<<"$2" ;;
    esac
}

for p in $PROXIES; do
    for o in $OBJECTS; do
        url="http://127.0.0.1:${PROXY_PORT[$p]}/$o.bin"
        for n in 1 2; do
            hdr="$(curl -sS --fail -o "$RUN/$p-$o.body" -D - "$url")" \
                || die "$p: GET $url failed"
            cmp -s "$RUN/$p-$o.body" "$DOCROOT/$o.bin" \
                || die "$p: body of $url differs from the origin's file"
        done
        if ! is_hit "$p" "$hdr"; then
            printf '%s\n' "$hdr" >&2
            die "$p: second GET $url was not a cache hit (headers above)"
        fi
        log "$p: /$o.bin warm, second request was a hit"
    done
done

# ---------------------------------------------------------------- measure ----
wrk_report_lua "$RUN/report.lua"

cpu_ticks() { # pid -> utime+stime of the whole process, in clock ticks
    local s
    s="$(cat "/proc/$1/stat")" || die "process $1 vanished"
    s="${s##*) }"
    awk '{ print $12 + $13 }' <<<"$s"
}

declare -A R_RPS R_P50 R_P99 R_REQ R_INSTR R_CPU R_PCPU R_WCPU R_OCPU R_RANGE
NOTES=()

measure() { # proxy object run -> R_*["proxy-object#run"]
    local p="$1" o="$2" r="$3"
    local pid="${PROXY_PID[$p]}"
    local url="http://127.0.0.1:${PROXY_PORT[$p]}/$o.bin"
    local k="$p-$o#$r" f="$RUN/$p-$o.$r" what="$p /$o.bin"
    [ "$RUNS" -eq 1 ] || what+=" (run $r)"
    local perf_pid="" t0 t1 s0 s1 line req dur errs v real user sys ins
    log "$what: wrk -t1 -c$CONNS -d${DURATION}s"

    if [ "$PERF_OK" -eq 1 ]; then
        perf stat -x, -e instructions -o "$f.perf" -p "$pid" &
        perf_pid=$!
        CUR_PERF="$perf_pid"
        sleep 0.3
    fi
    t0="$(cpu_ticks "$pid")"
    s0="$(sys_busy)"
    TIMEFORMAT='%R %U %S'
    { time taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency \
          -s "$RUN/report.lua" "$url" >"$f.wrk" 2>&1; } 2>"$f.time" \
        || { cat "$f.wrk" >&2; die "wrk failed for $url"; }
    t1="$(cpu_ticks "$pid")"
    s1="$(sys_busy)"
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" 2>/dev/null || true
        CUR_PERF=""
    fi

    line="$(grep '^BENCH ' "$f.wrk" || true)"
    [ -n "$line" ] || { cat "$f.wrk" >&2; die "could not parse wrk output for $url"; }
    get() { sed -E "s/.* $1=([0-9]+).*/\1/" <<<" ${line#BENCH }"; }
    req="$(get requests)"; dur="$(get duration_us)"
    [ "$req" -gt 0 ] || die "$what: no requests completed"
    R_REQ[$k]="$req"
    R_RPS[$k]="$(awk -v r="$req" -v d="$dur" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
    R_P50[$k]="$(get p50_us)"
    R_P99[$k]="$(get p99_us)"
    errs=""
    for v in connect read write status timeout; do
        [ "$(get "$v")" -eq 0 ] || errs+=" $v=$(get "$v")"
    done
    [ -z "$errs" ] || NOTES+=("$what: wrk reported errors:$errs (raw output kept with KEEP=1)")

    read -r real user sys <"$f.time"
    R_CPU[$k]="$(awk -v a="$t0" -v b="$t1" -v hz="$CLK_TCK" -v n="$req" \
        'BEGIN { printf "%.2f", (b - a) / hz * 1e6 / n }')"
    R_PCPU[$k]="$(awk -v a="$t0" -v b="$t1" -v hz="$CLK_TCK" -v w="$real" \
        'BEGIN { printf "%.0f", (b - a) / hz / w * 100 }')"
    R_WCPU[$k]="$(awk -v u="$user" -v s="$sys" -v w="$real" \
        'BEGIN { printf "%.0f", (u + s) / w * 100 }')"
    R_OCPU[$k]="$(awk -v a="$s0" -v b="$s1" -v p0="$t0" -v p1="$t1" -v hz="$CLK_TCK" \
        -v u="$user" -v s="$sys" -v w="$real" \
        'BEGIN { o = ((b - a) - (p1 - p0)) / hz - (u + s); if (o < 0) o = 0; printf "%.0f", o / w * 100 }')"
    if [ "${R_OCPU[$k]}" -ge 10 ]; then
        NOTES+=("$what: other processes used ${R_OCPU[$k]}% of a core during the run; the machine was not quiet, expect noise")
    fi
    if [ "${R_WCPU[$k]}" -ge 95 ] && [ "${R_PCPU[$k]}" -lt 90 ]; then
        NOTES+=("$what: wrk used ${R_WCPU[$k]}% of its core but the proxy only ${R_PCPU[$k]}%: the client, not the proxy, was the limit")
    fi

    R_INSTR[$k]="n/a"
    if [ -n "$perf_pid" ]; then
        ins="$(awk -F, '$3 ~ /^instructions/ && $1 ~ /^[0-9]+$/ { print $1; exit }' "$f.perf" || true)"
        if [ -n "$ins" ]; then
            R_INSTR[$k]="$(awk -v i="$ins" -v n="$req" 'BEGIN { printf "%.0f", i / n }')"
        else
            NOTES+=("$what: perf stat gave no instruction count")
        fi
    fi
}

# Runs are interleaved (all proxies and objects once, then again) so that
# slow drift of the machine hits every cell alike.
for r in $(seq "$RUNS"); do
    for o in $OBJECTS; do
        for p in $PROXIES; do
            measure "$p" "$o" "$r"
        done
    done
done

# Each cell reports the run with the median req/s (the lower middle one for
# an even RUNS), so that all its columns come from one consistent run.
for o in $OBJECTS; do
    for p in $PROXIES; do
        t="$p-$o"
        order="$(for r in $(seq "$RUNS"); do echo "${R_RPS[$t#$r]} $r"; done | sort -n)"
        mid="$(sed -n "$(( (RUNS + 1) / 2 ))p" <<<"$order" | cut -d' ' -f2)"
        for a in R_RPS R_P50 R_P99 R_REQ R_INSTR R_CPU R_PCPU R_WCPU R_OCPU; do
            declare -n arr="$a"
            arr["$t"]="${arr[$t#$mid]}"
            unset -n arr
        done
        R_RANGE[$t]="$(head -n1 <<<"$order" | cut -d' ' -f1)–$(tail -n1 <<<"$order" | cut -d' ' -f1)"
    done
done

# ----------------------------------------------------------------- report ----
ms() { awk -v u="$1" 'BEGIN { printf "%.3f ms", u / 1000 }'; }
ratio() { # a b -> a/b
    case "$1$2" in *n/a*|'') echo "n/a"; return ;; esac
    awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2fx", a / b }'
}

report_start hit
bin_info=""
if has "$PROXIES" hoard; then
    bin_info=" (binary built $(hoard_built))"
fi
nginx_ver="$(nginx -v 2>&1 | sed 's/^nginx version: //')"
{
    echo "# hoard cache-hit benchmark ($STAMP)"
    echo
    machine_line
    echo "- hoard: git $git_rev$bin_info, --threads 1; nginx: $nginx_ver, worker_processes 1"
    echo "- proxy pinned to CPU $PROXY_CPU, wrk pinned to CPU $WRK_CPU"
    echo "- load: wrk -t1 -c$CONNS -d${DURATION}s --latency, every request a cache hit"
    [ "$RUNS" -eq 1 ] || echo "- runs: $RUNS per cell, interleaved; each row is the run with the median req/s, range = lowest–highest req/s"
    if [ "$PERF_OK" -eq 1 ]; then
        echo "- instructions: perf stat -e instructions on the proxy process (nginx: worker)"
    else
        echo "- instructions: n/a (perf counters unsupported)"
    fi
    echo "- cpu µs/req: user+sys CPU time of the proxy process / requests"
    echo "- proxy / wrk / other cpu: share of one core used by the proxy, by wrk, and by everything else on the machine"
    echo
    rc_h="" rc_s=""
    if [ "$RUNS" -gt 1 ]; then rc_h=" req/s range |"; rc_s="---:|"; fi
    echo "| proxy | object | requests | req/s |$rc_h p50 | p99 | instr/req | cpu µs/req | proxy cpu | wrk cpu | other cpu |"
    echo "|---|---|---:|---:|$rc_s---:|---:|---:|---:|---:|---:|---:|"
    for o in $OBJECTS; do
        for p in $PROXIES; do
            t="$p-$o"
            rc=""; [ "$RUNS" -eq 1 ] || rc=" ${R_RANGE[$t]} |"
            echo "| $p | $o | ${R_REQ[$t]} | ${R_RPS[$t]} |$rc $(ms "${R_P50[$t]}") | $(ms "${R_P99[$t]}") | ${R_INSTR[$t]} | ${R_CPU[$t]} | ${R_PCPU[$t]}% | ${R_WCPU[$t]}% | ${R_OCPU[$t]}% |"
        done
        if has "$PROXIES" nginx && has "$PROXIES" hoard; then
            h="hoard-$o"; n="nginx-$o"
            rc=""; [ "$RUNS" -eq 1 ] || rc=" |"
            echo "| **hoard/nginx** | $o | | **$(ratio "${R_RPS[$h]}" "${R_RPS[$n]}")** |$rc $(ratio "${R_P50[$h]}" "${R_P50[$n]}") | $(ratio "${R_P99[$h]}" "${R_P99[$n]}") | **$(ratio "${R_INSTR[$h]}" "${R_INSTR[$n]}")** | $(ratio "${R_CPU[$h]}" "${R_CPU[$n]}") | | | |"
        fi
        if has "$PROXIES" hoard && has "$PROXIES" hoard-filter; then
            h="hoard-filter-$o"; n="hoard-$o"
            rc=""; [ "$RUNS" -eq 1 ] || rc=" |"
            echo "| **filter/plain** | $o | | **$(ratio "${R_RPS[$h]}" "${R_RPS[$n]}")** |$rc $(ratio "${R_P50[$h]}" "${R_P50[$n]}") | $(ratio "${R_P99[$h]}" "${R_P99[$n]}") | **$(ratio "${R_INSTR[$h]}" "${R_INSTR[$n]}")** | $(ratio "${R_CPU[$h]}" "${R_CPU[$n]}") | | | |"
        fi
    done
    if [ "${#NOTES[@]}" -gt 0 ]; then
        echo
        echo "Notes:"
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
} >"$REPORT"

report_done
