#!/usr/bin/env bash
# Operations benchmark: what observability and purging cost on the hit path.
#
# 1. Logs and metrics: 1 KiB cache hits through hoard as started plainly and
#    through hoard with its admin listener, a JSON access log to a file and a
#    scrape of /metrics once per second (as Prometheus would), and through
#    hoard with the admin listener and scrapes only; the same for
#    nginx proxy_cache with `access_log off` and with a buffered access log.
#    Runs are interleaved; each cell shows its median run.
# 2. Tag purge: hoard holds OBJECTS_N small objects tagged `bulk` (origin
#    header Surrogate-Key) and serves hits on /hot.bin to wrk; one run without
#    a purge, one with `POST /purge {"tag":"bulk"}` sent PURGE_AT seconds in.
#    Purge time, objects purged, and hit throughput and latency with and
#    without the purge.
#
# The proxy is pinned to one CPU, wrk (and curl) to another.  See
# bench/README.md for how to read the output.
#
# Environment knobs (all optional):
#   DURATION=10        seconds per wrk run
#   CONNS=64           wrk connections for the hit load
#   RUNS=3             runs per cell, interleaved; the median run (by req/s) is shown
#   TESTS="observe purge"   which parts to run
#   OBJECTS_N=100000   objects tagged `bulk` before each purge
#   FILL_CONNS=64      wrk connections used to fetch them
#   PURGE_AT=2         seconds into the hit run at which the purge is sent
#   SCRAPE_EVERY=1     seconds between two scrapes of /metrics (part 1)
#   QUIET_WAIT=0       before each run, wait up to this many seconds for the
#                      machine to be quiet (other processes under 10% of a core)
#   PROXY_CPU=0 WRK_CPU=1   CPUs used for the proxy under test and for wrk
#   HOARD_BIN=path     use this binary instead of building target/release/hoard
#   SKIP_BUILD=1       do not run cargo build (HOARD_BIN or an existing binary)
#   KEEP=1             keep bench/out/ops.* (configs, logs, raw wrk output)
#   BASE_PORT=18380    first loopback port to try
set -euo pipefail

BENCH_NAME=ops
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
CONNS="${CONNS:-64}"
RUNS="${RUNS:-3}"
TESTS="${TESTS:-observe purge}"
OBJECTS_N="${OBJECTS_N:-100000}"
FILL_CONNS="${FILL_CONNS:-64}"
PURGE_AT="${PURGE_AT:-2}"
SCRAPE_EVERY="${SCRAPE_EVERY:-1}"
QUIET_WAIT="${QUIET_WAIT:-0}"
PROXY_CPU="${PROXY_CPU:-0}"
WRK_CPU="${WRK_CPU:-1}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"

NEXT_PORT="${BASE_PORT:-18380}"

for v in DURATION CONNS RUNS OBJECTS_N FILL_CONNS PURGE_AT SCRAPE_EVERY QUIET_WAIT; do
    require_whole "$v"
done
require_positive DURATION CONNS RUNS OBJECTS_N FILL_CONNS SCRAPE_EVERY
[ "$PURGE_AT" -lt "$DURATION" ] || die "PURGE_AT ($PURGE_AT) must be less than DURATION ($DURATION)"
for t in $TESTS; do
    case "$t" in observe|purge) ;; *) die "unknown test '$t' in TESTS (observe purge)" ;; esac
done

# ---------------------------------------------------------------- tools ----
ensure_tools nginx:nginx-light wrk:wrk curl:curl taskset:util-linux
check_cpus PROXY_CPU WRK_CPU "proxy and wrk"
raise_nofile
build_hoard

# ------------------------------------------------------------- work dir ----
start_run ops
TIMEFORMAT='%R %U %S'

now_us() { echo "${EPOCHREALTIME/./}"; }
field() { sed -nE "s/.*[ ]$2=([0-9.]+).*/\1/p" <<<" $1"; } # "line" key -> value

cpu_ticks() { # pid -> utime+stime of the whole process, in clock ticks
    local s
    s="$(cat "/proc/$1/stat")" || die "process $1 vanished"
    s="${s##*) }"
    awk '{ print $12 + $13 }' <<<"$s"
}

writer_ticks() { # pid -> utime+stime of its access log writer thread (0 if none)
    local t s n=0
    for t in /proc/"$1"/task/*; do
        case "$(cat "$t/comm" 2>/dev/null)" in hoard-access*) ;; *) continue ;; esac
        s="$(cat "$t/stat")"; s="${s##*) }"
        n=$((n + $(awk '{ print $12 + $13 }' <<<"$s")))
    done
    echo "$n"
}

metric() { # admin-port 'name{labels}' -> value (empty if absent)
    curl -sS -m 10 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m && !seen { printf "%.0f\n", $2; seen = 1 }'
}

wait_quiet() { # before a run: wait up to QUIET_WAIT s while others use >= 10% of a core
    [ "$QUIET_WAIT" -gt 0 ] || return 0
    local waited=0 a b
    while :; do
        a="$(sys_busy)"; sleep 1; b="$(sys_busy)"
        [ $(( (b - a) * 10 )) -ge "$CLK_TCK" ] || return 0
        [ "$waited" -lt "$QUIET_WAIT" ] || { log "machine still busy after ${QUIET_WAIT}s, running anyway"; return 0; }
        [ "$waited" -gt 0 ] || log "machine busy ($(( (b - a) * 100 / CLK_TCK ))% of a core), waiting up to ${QUIET_WAIT}s"
        waited=$((waited + 1))
    done
}

# --------------------------------------------------------------- origin ----
free_port ORIGIN_PORT
DOCROOT="$RUN/www"
mkdir -p "$DOCROOT"
head -c 1024 /dev/urandom >"$DOCROOT/hot.bin"

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
        listen 127.0.0.1:$ORIGIN_PORT backlog=4096;
        root $DOCROOT;
        location = /hot.bin {
            expires 1h;
        }
        # Any /obj/N: a small body naming the object, tagged "bulk".
        location /obj/ {
            default_type text/plain;
            add_header Cache-Control "max-age=3600";
            add_header Surrogate-Key "bulk";
            return 200 "\$uri\n";
        }
    }
}
EOF
} >"$RUN/origin.conf"

log "origin nginx on 127.0.0.1:$ORIGIN_PORT"
start_nginx origin
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"
hdr="$(curl -sS -o /dev/null -D - "http://127.0.0.1:$ORIGIN_PORT/hot.bin")"
grep -qi '^cache-control: *max-age=3600' <<<"$hdr" || die "origin does not send Cache-Control: max-age=3600 for /hot.bin"
hdr="$(curl -sS -o "$RUN/obj7.body" -D - "http://127.0.0.1:$ORIGIN_PORT/obj/7")"
grep -qi '^surrogate-key: *bulk' <<<"$hdr" || die "origin does not send Surrogate-Key: bulk for /obj/7"
[ "$(cat "$RUN/obj7.body")" = /obj/7 ] || die "origin body of /obj/7 is not '/obj/7'"

# -------------------------------------------------------------- proxies ----
declare -A PORT PID ADMIN MASTER

start_hoard() { # name port [extra args...]: hoard pinned to PROXY_CPU
    local name="$1" port="$2"; shift 2
    mkdir -p "$RUN/$name"
    log "$name: hoard on 127.0.0.1:$port (CPU $PROXY_CPU, --threads 1) $*"
    spawn "$RUN/$name/stdout.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" \
        --upstream "http://127.0.0.1:$ORIGIN_PORT" \
        --listen "127.0.0.1:$port" \
        --cache-size 512MiB \
        --threads 1 "$@"
    wait_port "$port" "$name" "$STARTED_PID" "$RUN/$name/stdout.log"
    PORT[$name]="$port"
    PID[$name]="$STARTED_PID"
}

start_nginx_proxy() { # name port access_log-directive: nginx proxy_cache as in hit.sh
    local name="$1" port="$2" alog="$3"
    log "$name: nginx proxy_cache on 127.0.0.1:$port (CPU $PROXY_CPU), $alog"
    start_nginx_proxy_cache "$name" "$port" "$alog"
    PORT[$name]="$port"
    PID[$name]="$NGINX_WORKER"
    MASTER[$name]="$NGINX_MASTER"
}

is_hit() { grep -Eqi '^(cache-status:.*hoard; *hit|x-cache: *hit)' <<<"$1"; }

warm() { # name: /hot.bin twice, same body as the origin's file, second a hit
    local name="$1" url="http://127.0.0.1:${PORT[$1]}/hot.bin" h _
    for _ in 1 2; do
        h="$(curl -sS --fail -o "$RUN/$name/hot.body" -D - "$url")" || die "$name: GET $url failed"
        cmp -s "$RUN/$name/hot.body" "$DOCROOT/hot.bin" || die "$name: body of $url differs from the origin's file"
    done
    is_hit "$h" || { printf '%s\n' "$h" >&2; die "$name: second GET $url was not a cache hit (headers above)"; }
    log "$name: /hot.bin warm, second request was a hit"
}

# ---------------------------------------------------------------- measure ----
wrk_report_lua "$RUN/report.lua"
cat >>"$RUN/report.lua" <<'EOF'
local summary_done = done
done = function(summary, latency, requests)
  summary_done(summary, latency, requests)
  io.write(string.format("TAIL p999_us=%d\n", latency:percentile(99.9)))
end
EOF

declare -A R_RPS R_P50 R_P99 R_P999 R_MAX R_REQ R_CPU R_PCPU R_WCPU R_OCPU R_RANGE R_LOG
NOTES=()

# measure_start key pid url: wrk on the hit URL in the background (the caller
# may act during the run), then measure_finish.
measure_start() {
    M_KEY="$1"; M_PID="$2"; M_URL="$3"; M_F="$RUN/${1//#/.}"
    log "$M_KEY: wrk -t1 -c$CONNS -d${DURATION}s $M_URL"
    M_T0="$(cpu_ticks "$M_PID")"
    M_S0="$(sys_busy)"
    ( { time taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency \
          -s "$RUN/report.lua" "$M_URL" >"$M_F.wrk" 2>&1; } 2>"$M_F.time" ) &
    M_WRK=$!
}

measure_finish() { # sets R_*[M_KEY]
    local k="$M_KEY" t1 s1 line tail req dur errs v real user sys
    wait "$M_WRK" || { cat "$M_F.wrk" >&2; die "wrk failed for $M_URL"; }
    t1="$(cpu_ticks "$M_PID")"
    s1="$(sys_busy)"
    line="$(grep '^BENCH ' "$M_F.wrk" || true)"
    tail="$(grep '^TAIL ' "$M_F.wrk" || true)"
    [ -n "$line" ] && [ -n "$tail" ] || { cat "$M_F.wrk" >&2; die "could not parse wrk output for $M_URL"; }
    req="$(field "$line" requests)"; dur="$(field "$line" duration_us)"
    [ "$req" -gt 0 ] || die "$k: no requests completed"
    R_REQ[$k]="$req"
    R_RPS[$k]="$(awk -v r="$req" -v d="$dur" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
    R_P50[$k]="$(field "$line" p50_us)"
    R_P99[$k]="$(field "$line" p99_us)"
    R_MAX[$k]="$(field "$line" max_us)"
    R_P999[$k]="$(field "$tail" p999_us)"
    errs=""
    for v in connect read write status timeout; do
        [ "$(field "$line" "$v")" -eq 0 ] || errs+=" $v=$(field "$line" "$v")"
    done
    [ -z "$errs" ] || NOTES+=("$k: wrk reported errors:$errs (raw output kept with KEEP=1)")
    read -r real user sys <"$M_F.time"
    R_CPU[$k]="$(awk -v a="$M_T0" -v b="$t1" -v hz="$CLK_TCK" -v n="$req" \
        'BEGIN { printf "%.2f", (b - a) / hz * 1e6 / n }')"
    R_PCPU[$k]="$(awk -v a="$M_T0" -v b="$t1" -v hz="$CLK_TCK" -v w="$real" \
        'BEGIN { printf "%.0f", (b - a) / hz / w * 100 }')"
    R_WCPU[$k]="$(awk -v u="$user" -v s="$sys" -v w="$real" \
        'BEGIN { printf "%.0f", (u + s) / w * 100 }')"
    R_OCPU[$k]="$(awk -v a="$M_S0" -v b="$s1" -v p0="$M_T0" -v p1="$t1" -v hz="$CLK_TCK" \
        -v u="$user" -v s="$sys" -v w="$real" \
        'BEGIN { o = ((b - a) - (p1 - p0)) / hz - (u + s); if (o < 0) o = 0; printf "%.0f", o / w * 100 }')"
    if [ "${R_OCPU[$k]}" -ge 10 ]; then
        NOTES+=("$k: other processes used ${R_OCPU[$k]}% of a core during the run; the machine was not quiet, expect noise")
    fi
    if [ "${R_WCPU[$k]}" -ge 95 ] && [ "${R_PCPU[$k]}" -lt 90 ]; then
        NOTES+=("$k: wrk used ${R_WCPU[$k]}% of its core but the proxy only ${R_PCPU[$k]}%: the client, not the proxy, was the limit")
    fi
}

median_of() { # cell: copy the fields of the run with the median req/s to R_*[cell]
    local t="$1" order mid a
    order="$(for r in $(seq "$RUNS"); do echo "${R_RPS[$t#$r]} $r"; done | sort -n)"
    mid="$(sed -n "$(( (RUNS + 1) / 2 ))p" <<<"$order" | cut -d' ' -f2)"
    for a in R_RPS R_P50 R_P99 R_P999 R_MAX R_REQ R_CPU R_PCPU R_WCPU R_OCPU R_LOG; do
        declare -n arr="$a"
        arr["$t"]="${arr[$t#$mid]:-}"
        unset -n arr
    done
    R_RANGE[$t]="$(head -n1 <<<"$order" | cut -d' ' -f1)–$(tail -n1 <<<"$order" | cut -d' ' -f1)"
}

ms() { awk -v u="$1" 'BEGIN { printf "%.2f ms", u / 1000 }'; }
ratio() { # a b -> a/b
    case "$1$2" in *n/a*|'') echo "n/a"; return ;; esac
    awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2fx", a / b }'
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }'; } # a vs b

# ------------------------------------------------- 1. logs and metrics ----
# hoard-off: plain; hoard-metrics: admin listener and /metrics scraped, no
# access log (to tell the two costs apart); hoard-on: admin, scrapes and the
# access log.  nginx-off / nginx-on: without / with a buffered access log.
OBS_MODES_hoard="off metrics on"
OBS_MODES_nginx="off on"
OBS_CELLS="hoard-off hoard-metrics hoard-on nginx-off nginx-on"
if has "$TESTS" observe; then
    free_port p; start_hoard hoard-off "$p"
    free_port p; free_port a
    ADMIN[hoard-metrics]="$a"
    start_hoard hoard-metrics "$p" --admin "127.0.0.1:$a"
    wait_port "$a" "hoard-metrics admin" "${PID[hoard-metrics]}" "$RUN/hoard-metrics/stdout.log"
    free_port p; free_port a
    ADMIN[hoard-on]="$a"
    start_hoard hoard-on "$p" --admin "127.0.0.1:$a" --access-log "$RUN/hoard-on/access.log"
    wait_port "$a" "hoard-on admin" "${PID[hoard-on]}" "$RUN/hoard-on/stdout.log"
    free_port p; start_nginx_proxy nginx-off "$p" "access_log off;"
    free_port p; start_nginx_proxy nginx-on "$p" "access_log $RUN/nginx-on/access.log combined buffer=64k;"
    for c in $OBS_CELLS; do warm "$c"; done
    v="$(metric "${ADMIN[hoard-on]}" 'hoard_events_total{event="access_log_dropped"}')"
    [ -n "$v" ] || die "hoard-on: /metrics has no hoard_events_total{event=\"access_log_dropped\"}"

    obs_run() { # cell run
        local c="$1" r="$2" k="$1#$2" scr="" lines d0 d1 n w0 w1 real
        local url="http://127.0.0.1:${PORT[$1]}/hot.bin" log_f="$RUN/$1/access.log"
        wait_quiet
        case "$c" in hoard-on|nginx-on) : >"$log_f" ;; esac
        if [ "$c" = hoard-on ]; then
            d0="$(metric "${ADMIN[$c]}" 'hoard_events_total{event="access_log_dropped"}')"
            w0="$(writer_ticks "${PID[$c]}")"
        fi
        if [ -n "${ADMIN[$c]:-}" ]; then
            # A scraper on the client CPU, as Prometheus would be.
            spawn "$RUN/$c/scrape.$r" taskset -c "$WRK_CPU" bash -c \
                "while :; do curl -s -o /dev/null -w '%{http_code} %{size_download}\n' http://127.0.0.1:${ADMIN[$c]}/metrics; sleep $SCRAPE_EVERY; done"
            scr="$STARTED_PID"
        fi
        measure_start "$k" "${PID[$c]}" "$url"
        measure_finish
        R_LOG[$k]="–"
        if [ -n "$scr" ]; then
            stop_pid "$scr"
            n="$(grep -c '^200 [1-9]' "$RUN/$c/scrape.$r" || true)"
            R_LOG[$k]="$n scrapes"
            [ "$n" -ge $((DURATION / SCRAPE_EVERY - 1)) ] || NOTES+=("$k: only $n successful scrapes of /metrics")
        fi
        case "$c" in
            hoard-on)
                w1="$(writer_ticks "${PID[$c]}")"
                read -r real _ <"$M_F.time"
                sleep 0.5 # the writer flushes when its queue runs empty
                lines="$(wc -l <"$log_f")"
                d1="$(metric "${ADMIN[$c]}" 'hoard_events_total{event="access_log_dropped"}')"
                R_LOG[$k]="$(awk -v l="$lines" -v n="${R_REQ[$k]}" 'BEGIN { printf "%.3f", l / n }'), $((d1 - d0)) dropped, ${R_LOG[$k]}, writer thread $(awk -v a="$w0" -v b="$w1" -v hz="$CLK_TCK" -v w="$real" 'BEGIN { printf "%.0f", (b - a) / hz / w * 100 }')% cpu"
                [ $((d1 - d0)) -eq 0 ] || NOTES+=("$k: the access log dropped $((d1 - d0)) lines (writer behind)")
                ;;
            nginx-on)
                kill -USR1 "${MASTER[$c]}" # reopen: flushes the worker's 64k buffer
                sleep 0.5
                lines="$(wc -l <"$log_f")"
                R_LOG[$k]="$(awk -v l="$lines" -v n="${R_REQ[$k]}" 'BEGIN { printf "%.3f", l / n }')"
                ;;
        esac
    }

    # Interleaved: every cell once per round; within a proxy, the modes run
    # in one order in odd rounds and reversed in even ones, so that drift
    # hits them alike.
    for r in $(seq "$RUNS"); do
        for p in hoard nginx; do
            declare -n modes="OBS_MODES_$p"
            order="$modes"
            [ $((r % 2)) -eq 1 ] || order="$(tr ' ' '\n' <<<"$modes" | tac | tr '\n' ' ')"
            unset -n modes
            for m in $order; do obs_run "$p-$m" "$r"; done
        done
    done
    for c in $OBS_CELLS; do median_of "$c"; done
    for c in $OBS_CELLS; do stop_pid "${MASTER[$c]:-${PID[$c]}}"; done
fi

# ------------------------------------------------------- 2. tag purge ----
declare -A X_DURING X_FILL_S X_FILL_RPS X_BEFORE X_PURGED X_CURL_MS X_HOARD_MS X_AFTER X_OBJ5 X_HOT
if has "$TESTS" purge; then
    free_port p; free_port a
    ADMIN[hoard]="$a"
    start_hoard hoard "$p" --admin "127.0.0.1:$a"
    wait_port "$a" "hoard admin" "${PID[hoard]}" "$RUN/hoard/stdout.log"
    warm hoard
    base="http://127.0.0.1:${PORT[hoard]}"
    admin="http://127.0.0.1:$a"
    mem_objects() { metric "${ADMIN[hoard]}" 'hoard_objects{tier="memory"}'; }

    fill() { # run: fetch /obj/0..N-1 once each through hoard
        local r="$1" f="$RUN/fill.$1" line t0 t1 pid n
        rm -f "$f.done"
        log "purge run $r: fetching /obj/0../obj/$((OBJECTS_N - 1)) (wrk -c$FILL_CONNS)"
        t0="$(now_us)"
        # wrk keeps running for its whole -d after its thread has stopped;
        # SIGINT ends it early, and it still prints the summary.
        spawn "$f.wrk" taskset -c "$WRK_CPU" wrk -t1 -c"$FILL_CONNS" -d600s --timeout 10s \
            -s "$BENCH_DIR/ops_fill.lua" "$base/" -- "$OBJECTS_N" "$f.done"
        pid="$STARTED_PID"
        while [ ! -e "$f.done" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
        t1="$(now_us)"
        kill -INT "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        stop_pid "$pid"
        [ -e "$f.done" ] || { cat "$f.wrk" >&2; die "wrk ended before fetching every object"; }
        line="$(grep '^FILL ' "$f.wrk" || true)"
        [ -n "$line" ] || { cat "$f.wrk" >&2; die "could not parse the fill output"; }
        [ "$(field "$line" bad)" = 0 ] && [ "$(field "$line" errors)" = 0 ] || die "errors while fetching the objects: $line"
        X_FILL_S[$r]="$(awk -v d="$((t1 - t0))" 'BEGIN { printf "%.1f", d / 1e6 }')"
        X_FILL_RPS[$r]="$(awk -v n="$(field "$line" got)" -v d="$((t1 - t0))" 'BEGIN { printf "%.0f", n / (d / 1e6) }')"
        # The last fills may still be storing: wait until the count settles.
        for _ in $(seq 50); do
            n="$(mem_objects)"
            [ "$n" -le "$OBJECTS_N" ] || break
            sleep 0.1
        done
        [ "$n" -gt "$OBJECTS_N" ] \
            || die "hoard holds $n objects in memory after the fetch, expected $OBJECTS_N + /hot.bin"
        log "purge run $r: $n objects in memory (${X_FILL_S[$r]} s, ${X_FILL_RPS[$r]} req/s)"
        sleep 1
    }

    for r in $(seq "$RUNS"); do
        fill "$r"
        wait_quiet
        measure_start "nopurge#$r" "${PID[hoard]}" "$base/hot.bin"
        measure_finish
        X_BEFORE[$r]="$(mem_objects)"
        wait_quiet
        measure_start "purge#$r" "${PID[hoard]}" "$base/hot.bin"
        sleep "$PURGE_AT"
        log "purge run $r: POST /purge {\"tag\":\"bulk\"}"
        h0="$(metric "${ADMIN[hoard]}" 'hoard_requests_total{cache="hit"}')"
        out="$(taskset -c "$WRK_CPU" curl -sS -m 120 -o "$RUN/purge.$r.json" -w '%{http_code} %{time_total}' \
            -X POST -H 'Content-Type: application/json' --data '{"tag":"bulk"}' "$admin/purge")" \
            || die "POST /purge failed"
        h1="$(metric "${ADMIN[hoard]}" 'hoard_requests_total{cache="hit"}')"
        measure_finish
        read -r code secs <<<"$out"
        X_DURING[$r]="$(awk -v a="$h0" -v b="$h1" -v s="$secs" 'BEGIN { printf "%.0f", (b - a) / s }')"
        [ "$code" = 200 ] || die "POST /purge answered $code: $(cat "$RUN/purge.$r.json")"
        X_CURL_MS[$r]="$(awk -v s="$secs" 'BEGIN { printf "%.1f", s * 1000 }')"
        X_PURGED[$r]="$(sed -nE 's/.*"purged": *([0-9]+).*/\1/p' "$RUN/purge.$r.json")"
        [ -n "${X_PURGED[$r]}" ] || die "unexpected purge answer: $(cat "$RUN/purge.$r.json")"
        [ "${X_PURGED[$r]}" -eq "$OBJECTS_N" ] || NOTES+=("purge run $r: purged ${X_PURGED[$r]} objects, expected $OBJECTS_N")
        X_HOARD_MS[$r]="$(grep 'purged=' "$RUN/hoard/stdout.log" | tail -n1 | sed -nE 's/.* ms=([0-9]+).*/\1/p')"
        X_HOARD_MS[$r]="${X_HOARD_MS[$r]:-n/a}"
        X_AFTER[$r]="$(mem_objects)"
        h="$(curl -sS -o /dev/null -D - "$base/obj/5")"
        X_OBJ5[$r]="$(sed -nE 's/^[Cc]ache-[Ss]tatus: *(.*)\r?$/\1/p' <<<"$h" | tr -d '\r' | sed -E 's/; *ttl=.*//')"
        if is_hit "$h"; then
            NOTES+=("purge run $r: /obj/5 was still a hit after the purge")
            X_OBJ5[$r]="**hit** (${X_OBJ5[$r]})"
        fi
        h="$(curl -sS -o /dev/null -D - "$base/hot.bin")"
        if is_hit "$h"; then X_HOT[$r]=hit; else X_HOT[$r]="**not a hit**"; NOTES+=("purge run $r: /hot.bin (untagged) was no longer a hit after the purge"); fi
        log "purge run $r: purged ${X_PURGED[$r]} in ${X_CURL_MS[$r]} ms (hoard: ${X_HOARD_MS[$r]} ms); /obj/5 afterwards: ${X_OBJ5[$r]}"
    done
    median_of nopurge
    median_of purge
fi

# ----------------------------------------------------------------- report ----
report_start ops
nginx_ver="$(nginx -v 2>&1 | sed 's/^nginx version: //')"
list() { local r s=""; for r in $(seq "$RUNS"); do declare -n arr="$1"; s+="${s:+ / }${arr[$r]}"; unset -n arr; done; echo "$s"; }
{
    echo "# hoard operations benchmark ($STAMP)"
    echo
    machine_line
    echo "- hoard: git $git_rev (binary built $(hoard_built)), --threads 1 --cache-size 512MiB; nginx: $nginx_ver, worker_processes 1"
    echo "- proxy pinned to CPU $PROXY_CPU, wrk and curl pinned to CPU $WRK_CPU"
    echo "- hit load: wrk -t1 -c$CONNS -d${DURATION}s --latency on a 1 KiB object, every request a cache hit"
    echo "- runs: $RUNS per cell, interleaved; each row is the run with the median req/s, range = lowest–highest req/s"
    echo "- cpu µs/req: user+sys CPU time of the proxy process (all threads; nginx: worker) / requests"
    echo "- proxy / wrk / other cpu: share of one core used by the proxy, by wrk, and by everything else on the machine"
    if has "$TESTS" observe; then
        echo
        echo "## 1. Logs and metrics on the hit path"
        echo
        echo "- hoard off: \`hoard --upstream … --listen … --cache-size 512MiB --threads 1\` (its metrics are counted all the same)"
        echo "- hoard metrics: the same with \`--admin ADDR\` and \`GET /metrics\` every ${SCRAPE_EVERY} s during the run, no access log"
        echo "- hoard on: \`--admin ADDR --access-log FILE\` (JSON lines, own writer thread) and \`GET /metrics\` every ${SCRAPE_EVERY} s"
        echo "- nginx off / on: \`proxy_cache\` as in hit.sh with \`access_log off\` / \`access_log FILE combined buffer=64k\`"
        echo "- log: lines in the access log / requests wrk completed; hoard: lines dropped, successful scrapes, share of a core used by the access log's writer thread (part of proxy cpu)"
        echo
        echo "| proxy | logs & metrics | requests | req/s | req/s range | p50 | p99 | cpu µs/req | proxy cpu | wrk cpu | other cpu | log |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        for p in hoard nginx; do
            declare -n modes="OBS_MODES_$p"
            for m in $modes; do
                t="$p-$m"
                echo "| $p | $m | ${R_REQ[$t]} | ${R_RPS[$t]} | ${R_RANGE[$t]} | $(ms "${R_P50[$t]}") | $(ms "${R_P99[$t]}") | ${R_CPU[$t]} | ${R_PCPU[$t]}% | ${R_WCPU[$t]}% | ${R_OCPU[$t]}% | ${R_LOG[$t]} |"
            done
            for m in $modes; do
                [ "$m" != off ] || continue
                on="$p-$m"; off="$p-off"; b=""; [ "$m" != on ] || b="**"
                echo "| $b$p $m/off$b | | | $b$(ratio "${R_RPS[$on]}" "${R_RPS[$off]}")$b | | $(ratio "${R_P50[$on]}" "${R_P50[$off]}") | $b$(ratio "${R_P99[$on]}" "${R_P99[$off]}")$b | $(ratio "${R_CPU[$on]}" "${R_CPU[$off]}") | | | | |"
            done
            unset -n modes
        done
        echo
        loss="$(pct "${R_RPS[hoard-on]}" "${R_RPS[hoard-off]}")"
        within="$(awk -v a="${R_RPS[hoard-on]}" -v b="${R_RPS[hoard-off]}" 'BEGIN { print (a >= 0.95 * b) ? "within" : "outside" }')"
        echo "hoard with logs and metrics on: $loss req/s against off ($within the 5% target), cpu µs/req $(pct "${R_CPU[hoard-on]}" "${R_CPU[hoard-off]}"); with metrics scraped but no access log: $(pct "${R_RPS[hoard-metrics]}" "${R_RPS[hoard-off]}") req/s, cpu µs/req $(pct "${R_CPU[hoard-metrics]}" "${R_CPU[hoard-off]}"). nginx with its buffered access log: $(pct "${R_RPS[nginx-on]}" "${R_RPS[nginx-off]}") req/s, cpu µs/req $(pct "${R_CPU[nginx-on]}" "${R_CPU[nginx-off]}")."
    fi
    if has "$TESTS" purge; then
        echo
        echo "## 2. Tag purge of $OBJECTS_N objects under a hit load"
        echo
        echo "- hoard \`--admin ADDR\` (no access log); before each run /obj/0…/obj/$((OBJECTS_N - 1)) fetched once each (wrk -c$FILL_CONNS, origin: \`Surrogate-Key: bulk\`, max-age=3600), taking $(list X_FILL_S) s ($(list X_FILL_RPS) req/s)"
        echo "- hits on /hot.bin (untagged) without a purge, then again with \`POST /purge {\"tag\":\"bulk\"}\` (curl) sent ${PURGE_AT} s into the run"
        echo
        echo "| hit load | requests | req/s | req/s range | p50 | p99 | p99.9 | max | cpu µs/req | proxy cpu | wrk cpu | other cpu |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for t in nopurge purge; do
            if [ "$t" = nopurge ]; then what="no purge"; else what="purge at ${PURGE_AT} s"; fi
            echo "| $what | ${R_REQ[$t]} | ${R_RPS[$t]} | ${R_RANGE[$t]} | $(ms "${R_P50[$t]}") | $(ms "${R_P99[$t]}") | $(ms "${R_P999[$t]}") | $(ms "${R_MAX[$t]}") | ${R_CPU[$t]} | ${R_PCPU[$t]}% | ${R_WCPU[$t]}% | ${R_OCPU[$t]}% |"
        done
        echo "| **purge/no purge** | | **$(ratio "${R_RPS[purge]}" "${R_RPS[nopurge]}")** | | $(ratio "${R_P50[purge]}" "${R_P50[nopurge]}") | **$(ratio "${R_P99[purge]}" "${R_P99[nopurge]}")** | $(ratio "${R_P999[purge]}" "${R_P999[nopurge]}") | $(ratio "${R_MAX[purge]}" "${R_MAX[nopurge]}") | $(ratio "${R_CPU[purge]}" "${R_CPU[nopurge]}") | | | |"
        echo
        echo "| run | objects in memory before | purged | purge time (curl) | purge time (hoard's log) | hits/s during the purge | objects after | /obj/5 after | /hot.bin after |"
        echo "|---:|---:|---:|---:|---:|---:|---:|---|---|"
        for r in $(seq "$RUNS"); do
            echo "| $r | ${X_BEFORE[$r]} | ${X_PURGED[$r]} | ${X_CURL_MS[$r]} ms | ${X_HOARD_MS[$r]} ms | ${X_DURING[$r]} | ${X_AFTER[$r]} | ${X_OBJ5[$r]} | ${X_HOT[$r]} |"
        done
        med="$(for r in $(seq "$RUNS"); do echo "${X_CURL_MS[$r]}"; done | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p")"
        echo
        echo "Median purge time: $med ms for $OBJECTS_N objects ($(awk -v m="$med" -v n="$OBJECTS_N" 'BEGIN { printf "%.1f", m * 1000 / n }') µs per object)."
    fi
    if [ "${#NOTES[@]}" -gt 0 ]; then
        echo
        echo "Notes:"
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
} >"$REPORT"

report_done
