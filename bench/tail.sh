#!/usr/bin/env bash
# Tail latency at a fixed request rate (open loop): hoard vs. Varnish and
# nginx, each in front of the slow app of fill.sh's microcaching scenario
# (1 s TTL, 10 s of stale serving), and on a hot key that never expires.
#
# The load generator, bench/openloop (Rust, built here; not a workspace
# member), sends RATE requests/s on CONNS keep-alive connections, each on its
# own schedule, and measures every request from its intended start: a stall
# of the server is paid by every request scheduled during it (no coordinated
# omission, unlike wrk's closed loop). See bench/README.md.
#
# Environment knobs (all optional):
#   PROXIES="hoard varnish nginx"   proxies to run (hoard and varnish give the ratios)
#   TARGETS="micro hot"    micro: /micro/ (1 s TTL + stale, a background refresh
#                          every second); hot: a max-age=3600 key (no refresh)
#   RATES="2000 10000"     requests/s
#   CONNS=10               keep-alive connections
#   DURATION=20 WARMUP=2   seconds measured / sent before measuring
#   RUNS=1                 runs per cell (interleaved across proxies); the row
#                          shows the run with the median p99
#   MICRO_WORKERS=10 MICRO_MS=200   the app (fill_origin.py)
#   BODY_SIZE=4096         response body size in bytes
#   HOARD_THREADS=1        hoard --threads
#   HOARD_LOG=             hoard's log filter (e.g. hoard_proxy=debug), to stdout.log
#   WARM_CPU=0             1: keep the proxies' CPU from ever idling with a busy loop at
#                          SCHED_IDLE priority (it yields to every other thread): shows
#                          what waking an idle (halted) virtual CPU costs the tail
#   PROBE=0                1: run bench/stall_probe.py on the proxy's CPU beside
#                          each run (it wakes every 1 ms there: it disturbs)
#   PROXY_CPU=0 CLIENT_CPU=1   CPUs for the proxies / for the client and origin
#   NICE=0                 e.g. -20 (root): run proxies, origin and client at that
#                          nice level (and this session's autogroup), ahead of other
#                          work on a shared machine (builds)
#   HOARD_BIN=path         use this binary instead of building target/release/hoard
#   SKIP_BUILD=1           do not run cargo build (hoard; openloop is always built)
#   KEEP=1                 keep bench/out/tail.* (configs, logs, per-request logs)
#   BASE_PORT=18380        first loopback port to try
set -euo pipefail

BENCH_NAME=tail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROXIES="${PROXIES:-hoard varnish nginx}"
TARGETS="${TARGETS:-micro hot}"
RATES="${RATES:-2000 10000}"
CONNS="${CONNS:-10}"
DURATION="${DURATION:-20}"
WARMUP="${WARMUP:-2}"
RUNS="${RUNS:-1}"
MICRO_WORKERS="${MICRO_WORKERS:-10}"
MICRO_MS="${MICRO_MS:-200}"
BODY_SIZE="${BODY_SIZE:-4096}"
HOARD_THREADS="${HOARD_THREADS:-1}"
HOARD_LOG="${HOARD_LOG:-}"
PROBE="${PROBE:-0}"
WARM_CPU="${WARM_CPU:-0}"
PROXY_CPU="${PROXY_CPU:-0}"
NICE="${NICE:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
SWR=10
NEXT_PORT="${BASE_PORT:-18380}"

for v in CONNS DURATION WARMUP RUNS MICRO_WORKERS MICRO_MS BODY_SIZE HOARD_THREADS; do
    require_whole "$v"
done
require_positive CONNS DURATION RUNS MICRO_WORKERS MICRO_MS BODY_SIZE HOARD_THREADS
for v in $RATES; do
    case "$v" in ''|*[!0-9]*|0) die "RATES must be whole numbers > 0" ;; esac
done
for p in $PROXIES; do
    case "$p" in hoard|nginx|varnish) ;; *) die "unknown proxy '$p' in PROXIES" ;; esac
done
for t in $TARGETS; do
    case "$t" in micro|hot) ;; *) die "unknown target '$t' in TARGETS" ;; esac
done

# ---------------------------------------------------------------- tools ----
wanted=(curl:curl taskset:util-linux python3:python3 cargo:cargo)
! has "$PROXIES" nginx || wanted+=(nginx:nginx-light)
! has "$PROXIES" varnish || wanted+=(varnishd:varnish)
ensure_tools "${wanted[@]}"
check_cpus PROXY_CPU CLIENT_CPU "proxies and client"
raise_nofile

# ---------------------------------------------------------------- build ----
! has "$PROXIES" hoard || build_hoard
OPENLOOP_TARGET="${OPENLOOP_TARGET:-$BENCH_DIR/openloop/target}"
log "building the load generator (bench/openloop)"
CARGO_TARGET_DIR="$OPENLOOP_TARGET" cargo build -q --release --offline \
    --manifest-path "$BENCH_DIR/openloop/Cargo.toml" \
    || CARGO_TARGET_DIR="$OPENLOOP_TARGET" cargo build -q --release \
        --manifest-path "$BENCH_DIR/openloop/Cargo.toml" \
    || die "cargo build of bench/openloop failed"
OPENLOOP="$OPENLOOP_TARGET/release/openloop"

start_run tail
set_priority
NOTES=()

b0="$(sys_busy)"; sleep 1; b1="$(sys_busy)"
busy="$(awk -v a="$b0" -v b="$b1" -v hz="$CLK_TCK" 'BEGIN { printf "%.0f", (b - a) / hz * 100 }')"
if [ "$busy" -ge 10 ]; then
    log "warning: the machine is busy ($busy% of a core used by other processes)"
    NOTES+=("before the run, other processes used $busy% of a core: expect noise, rerun on a quiet machine")
fi

# --------------------------------------------------------------- origin ----
free_port ORIGIN_PORT
ORIGIN="127.0.0.1:$ORIGIN_PORT"
log "origin (fill_origin.py) on $ORIGIN (CPU $CLIENT_CPU)"
spawn "$RUN/origin.log" "${PRIO[@]}" taskset -c "$CLIENT_CPU" python3 "$BENCH_DIR/fill_origin.py" --port "$ORIGIN_PORT" \
    --body-size "$BODY_SIZE" --micro-workers "$MICRO_WORKERS" --micro-ms "$MICRO_MS"
wait_port "$ORIGIN_PORT" origin "$STARTED_PID" "$RUN/origin.log"

# ---------------------------------------------------------------- proxies ----
# The configurations of fill.sh: 1 s TTL for the micro app, 10 s of stale
# serving with a background refresh, upstream keep-alive.
declare -A PORT
start_micro_proxies

warm_cpu "$PROXY_CPU"

# ------------------------------------------------------------- helpers ----
field() { # "line" key -> value
    local v
    v="$(tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n1)"
    printf '%s' "${v:--}"
}
ratio() { # a b -> a/b
    awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "n/a"; else if (a / b < 0.1) printf "%.3fx", a / b; else printf "%.2fx", a / b }'
}
usfmt() { # value in µs -> "0.123 ms" / "12.3 ms"
    case "$1" in ''|-) echo "n/a" ;; *) awk -v v="$1" 'BEGIN { m = v / 1000; if (m >= 1000) printf "%.2f s", m / 1000; else if (m >= 10) printf "%.1f ms", m; else if (m >= 1) printf "%.2f ms", m; else printf "%.3f ms", m }' ;; esac
}
origin_count() { curl -sS "http://$ORIGIN/__count?prefix=$1"; }
TAG="$(date +%s)"

# ------------------------------------------------------------- runs ----
declare -A RES ORPS STALL RANGE
# Marked in the per-request log: hoard's stale answers (a refresh under way).
declare -A MARK=([hoard]="cache-status:stale")
for t in $TARGETS; do
    for rate in $RATES; do
        for run in $(seq "$RUNS"); do
            for p in $PROXIES; do
                k="$t-$rate-$p-$run"
                if [ "$t" = micro ]; then path="/micro/$p-$rate-$run-$TAG"; else path="/cold/0/$p-$rate-$run-$TAG"; fi
                url="http://127.0.0.1:${PORT[$p]}$path"
                curl -sS --fail -o /dev/null "$url" || die "$p: GET $url failed"
                sleep 1.2
                curl -sS --fail -o /dev/null "$url" || die "$p: GET $url failed"
                c0="$(origin_count "$path")"
                log "$t: $p, $rate req/s on $CONNS connections, ${DURATION}s (+${WARMUP}s warm-up), run $run"
                probe=""
                if [ "$PROBE" = 1 ]; then
                    "${PRIO[@]}" taskset -c "$PROXY_CPU" python3 "$BENCH_DIR/stall_probe.py" "$((DURATION + WARMUP))" >"$RUN/$k.stall" 2>&1 &
                    probe=$!
                fi
                "${PRIO[@]}" taskset -c "$CLIENT_CPU" "$OPENLOOP" --addr "127.0.0.1:${PORT[$p]}" --path "$path" \
                    --rate "$rate" --conns "$CONNS" --duration "$DURATION" --warmup "$WARMUP" \
                    --log "$RUN/$k.log" ${MARK[$p]:+--mark "${MARK[$p]}"} >"$RUN/$k.out" 2>&1 || { cat "$RUN/$k.out" >&2; die "openloop failed for $url"; }
                [ -z "$probe" ] || { wait "$probe" || true; STALL[$k]="$(sed -n 's/^STALL max_ms=\([0-9.]*\).*/\1/p' "$RUN/$k.stall")"; }
                sleep 0.5
                c1="$(origin_count "$path")"
                RES[$k]="$(grep -m1 '^RESULT ' "$RUN/$k.out" || true)"
                [ -n "${RES[$k]}" ] || { cat "$RUN/$k.out" >&2; die "no result from openloop for $url"; }
                ORPS[$k]="$(awk -v o="$((c1 - c0))" -v d="$((DURATION + WARMUP))" 'BEGIN { printf "%.2f", o / d }')"
                e="$(field "${RES[$k]}" errors)"
                [ "$e" = 0 ] || NOTES+=("$t, $p, $rate req/s, run $run: $e failed requests ($(grep -m1 '^ERROR' "$RUN/$k.out" | sed 's/^ERROR //'))")
                log "  $(cut -d' ' -f2-11 <<<"${RES[$k]}") origin/s=${ORPS[$k]}"
            done
        done
        # The run with the median p99 stands for the cell.
        for p in $PROXIES; do
            best="$(for run in $(seq "$RUNS"); do echo "$(field "${RES[$t-$rate-$p-$run]}" p99_us) $run"; done \
                | sort -n | sed -n "$(((RUNS + 1) / 2))p" | cut -d' ' -f2)"
            RES[$t-$rate-$p]="${RES[$t-$rate-$p-$best]}"
            ORPS[$t-$rate-$p]="${ORPS[$t-$rate-$p-$best]}"
            STALL[$t-$rate-$p]="${STALL[$t-$rate-$p-$best]:-}"
            if [ "$RUNS" -gt 1 ]; then
                RANGE[$t-$rate-$p]="$(for run in $(seq "$RUNS"); do field "${RES[$t-$rate-$p-$run]}" p99_us; echo; done \
                    | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f–%.2f", lo / 1000, hi / 1000 }')"
            fi
            a="$(field "${RES[$t-$rate-$p]}" achieved)"
            awk -v a="$a" -v r="$rate" 'BEGIN { exit !(a < r * 0.98) }' \
                && NOTES+=("$t, $p, $rate req/s: only $a req/s completed in the measured window (the proxy or the client could not keep up)")
            lp="$(field "${RES[$t-$rate-$p]}" late_p99_us)"
            awk -v l="$lp" 'BEGIN { exit !(l > 500) }' \
                && NOTES+=("$t, $p, $rate req/s: the generator sent 1% of requests more than $(usfmt "$lp") late (its own scheduling, counted in the latencies)")
        done
    done
done

# ----------------------------------------------------------------- report ----
report_start tail
ORDER=""; for p in hoard varnish nginx; do has "$PROXIES" "$p" && ORDER+="$p "; done
{
    echo "# hoard open-loop tail latency ($STAMP)"
    echo
    machine_line
    has "$PROXIES" hoard && echo "- hoard: git $git_rev (binary built $(hoard_built)), ${HOARD_ARGS[*]}"
    has "$PROXIES" varnish && echo "- varnish: $(varnishd -V 2>&1 | head -n1 | sed -E 's/^varnishd \(([^ ]+) .*/\1/'), default thread pools, grace ${SWR}s, ttl 1s for the micro app"
    has "$PROXIES" nginx && echo "- nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //'), 1 worker, proxy_cache_lock on, proxy_cache_use_stale updating, proxy_cache_background_update on, proxy_cache_valid 200 1s"
    echo "- proxies pinned to CPU $PROXY_CPU; origin (fill_origin.py, app: $MICRO_WORKERS workers x $MICRO_MS ms) and openloop pinned to CPU $CLIENT_CPU; ${BODY_SIZE}-byte bodies"
    echo "- load: openloop, $CONNS keep-alive connections, fixed rate, ${DURATION}s measured after ${WARMUP}s; latency from each request's intended start to its last byte"
    echo "- other processes before the run: $busy% of one core"
    [ "$NICE" = 0 ] || echo "- proxies, origin and client at nice $NICE"
    [ "$WARM_CPU" = 1 ] && echo "- CPU $PROXY_CPU kept from idling by a SCHED_IDLE busy loop (WARM_CPU=1)"
    [ "$RUNS" -gt 1 ] && echo "- $RUNS runs per cell, interleaved; each row is the run with the median p99 (p99 range: all runs)"
    for t in $TARGETS; do
        echo
        if [ "$t" = micro ]; then
            echo "## micro: 1 s TTL, ${SWR} s stale-while-revalidate (a background refresh every second)"
        else
            echo "## hot: one key, max-age=3600 (no refresh)"
        fi
        echo
        echo "late p99 = the generator's own lateness in sending (99th percentile), part of every latency. origin/s = requests that reached the origin per second."
        echo
        hdr="| req/s | proxy | requests | p50 | p99 | p99.9 | max | > 1 ms | late p99 | origin/s |"
        sep="|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        [ "$RUNS" -gt 1 ] && { hdr+=" p99 range |"; sep+="---:|"; }
        [ "$PROBE" = 1 ] && { hdr+=" machine stall |"; sep+="---:|"; }
        echo "$hdr"; echo "$sep"
        for rate in $RATES; do
            for p in $ORDER; do
                r="${RES[$t-$rate-$p]}"
                row="| $rate | $p | $(field "$r" requests) | $(usfmt "$(field "$r" p50_us)") | $(usfmt "$(field "$r" p99_us)") | $(usfmt "$(field "$r" p999_us)") | $(usfmt "$(field "$r" max_us)") | $(field "$r" over1ms) | $(usfmt "$(field "$r" late_p99_us)") | ${ORPS[$t-$rate-$p]} |"
                [ "$RUNS" -gt 1 ] && row+=" ${RANGE[$t-$rate-$p]} ms |"
                [ "$PROBE" = 1 ] && row+=" $(awk -v m="${STALL[$t-$rate-$p]:-0}" 'BEGIN { printf "%.1f ms", m }') |"
                echo "$row"
            done
            if has "$PROXIES" hoard && has "$PROXIES" varnish; then
                h="${RES[$t-$rate-hoard]}"; v="${RES[$t-$rate-varnish]}"
                row="| $rate | **hoard/varnish** | | $(ratio "$(field "$h" p50_us)" "$(field "$v" p50_us)") | **$(ratio "$(field "$h" p99_us)" "$(field "$v" p99_us)")** | **$(ratio "$(field "$h" p999_us)" "$(field "$v" p999_us)")** | $(ratio "$(field "$h" max_us)" "$(field "$v" max_us)") | | | |"
                [ "$RUNS" -gt 1 ] && row+=" |"
                [ "$PROBE" = 1 ] && row+=" |"
                echo "$row"
            fi
        done
    done
    if [ "${#NOTES[@]}" -gt 0 ]; then
        echo
        echo "Notes:"
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
} >"$REPORT"

report_done
