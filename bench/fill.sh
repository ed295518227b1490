#!/usr/bin/env bash
# Cache-fill benchmark: what clients see while a proxy fetches from a slow
# origin.  hoard vs. nginx proxy_cache (and Varnish where it has the
# feature), four scenarios in one run:
#
#   cold     N simultaneous requests for a cold key (request coalescing)
#   private  simultaneous requests for an uncacheable URL (hit-for-pass)
#   stale    an expired object requested back to back on one keep-alive
#            connection while the origin takes seconds (stale-while-revalidate)
#   micro    1 s TTL in front of a slow application under wrk load
#
# The origin (bench/fill_origin.py) and the latency client
# (bench/fill_client.py) are Python 3 standard library only.  See
# bench/README.md for how to read the output.
#
# Environment knobs (all optional):
#   PROXIES="hoard nginx varnish"   proxies to run (hoard and nginx give the ratios)
#   SCENARIOS="cold private stale micro"
#   ROUNDS=3               rounds per cold-key case (a fresh URL each)
#   CLIENTS="10 100"       simultaneous clients in the cold-key scenario
#   DELAYS="100 5"         origin delays (ms) in the cold-key scenario
#   PRIVATE_CLIENTS=10 PRIVATE_ROUNDS=3 PRIVATE_DELAY=100
#   STALE_DELAY=3000 STALE_MAX_AGE=2 STALE_AFTER=1.5 STALE_COUNT=3
#                          (STALE_AFTER: seconds past max-age; nginx counts expiry in
#                          whole seconds, so less than 1 s may still find it fresh)
#   MICRO_DURATION=20 MICRO_CONNS=10 MICRO_WORKERS=10 MICRO_MS=200
#   MICRO_MAX_MS=20        hoard's slowest microcached response above this is noted
#   MICRO_BASELINE=1       also run wrk against the origin directly
#   BODY_SIZE=4096         response body size in bytes
#   HOARD_THREADS=1        hoard --threads
#   PROXY_CPU=0 CLIENT_CPU=1   CPUs for the proxies / for client, wrk and origin
#   HOARD_BIN=path         use this binary instead of building target/release/hoard
#   SKIP_BUILD=1           do not run cargo build
#   KEEP=1                 keep bench/out/fill.* (configs, logs, raw client output)
#   BASE_PORT=18180        first loopback port to try
#   NICE=0                 e.g. -20 (root): proxies, origin and clients at that nice
#                          level, and this session's autogroup (a shared machine)
#   WARM_CPU=0             1: a SCHED_IDLE busy loop keeps the proxies' CPU from idling
set -euo pipefail

BENCH_NAME=fill
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROXIES="${PROXIES:-hoard nginx varnish}"
SCENARIOS="${SCENARIOS:-cold private stale micro}"
ROUNDS="${ROUNDS:-3}"
CLIENTS="${CLIENTS:-10 100}"
DELAYS="${DELAYS:-100 5}"
PRIVATE_CLIENTS="${PRIVATE_CLIENTS:-10}"
PRIVATE_ROUNDS="${PRIVATE_ROUNDS:-3}"
PRIVATE_DELAY="${PRIVATE_DELAY:-100}"
STALE_DELAY="${STALE_DELAY:-3000}"
STALE_MAX_AGE="${STALE_MAX_AGE:-2}"
STALE_AFTER="${STALE_AFTER:-1.5}"
STALE_COUNT="${STALE_COUNT:-3}"
MICRO_DURATION="${MICRO_DURATION:-20}"
MICRO_CONNS="${MICRO_CONNS:-10}"
MICRO_WORKERS="${MICRO_WORKERS:-10}"
MICRO_MS="${MICRO_MS:-200}"
MICRO_MAX_MS="${MICRO_MAX_MS:-20}"
MICRO_BASELINE="${MICRO_BASELINE:-1}"
BODY_SIZE="${BODY_SIZE:-4096}"
HOARD_THREADS="${HOARD_THREADS:-1}"
PROXY_CPU="${PROXY_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
# Stale serving window given to every proxy: hoard --stale-while-revalidate,
# Varnish grace (its default_grace is 10 s too); nginx serves stale for as
# long as an update is in progress.
SWR=10
NEXT_PORT="${BASE_PORT:-18180}"

for v in ROUNDS PRIVATE_CLIENTS PRIVATE_ROUNDS PRIVATE_DELAY STALE_DELAY STALE_MAX_AGE \
         STALE_COUNT MICRO_DURATION MICRO_CONNS MICRO_WORKERS MICRO_MS BODY_SIZE HOARD_THREADS; do
    require_whole "$v"
    require_positive "$v"
done
for v in $CLIENTS $DELAYS; do
    case "$v" in ''|*[!0-9]*) die "CLIENTS and DELAYS must be whole numbers" ;; esac
done
for p in $PROXIES; do
    case "$p" in hoard|nginx|varnish) ;; *) die "unknown proxy '$p' in PROXIES" ;; esac
done
for s in $SCENARIOS; do
    case "$s" in cold|private|stale|micro) ;; *) die "unknown scenario '$s' in SCENARIOS" ;; esac
done

# ---------------------------------------------------------------- tools ----
wanted=(nginx:nginx-light wrk:wrk curl:curl taskset:util-linux python3:python3)
! has "$PROXIES" varnish || wanted+=(varnishd:varnish)
ensure_tools "${wanted[@]}"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "python3 >= 3.11 needed"

check_cpus PROXY_CPU CLIENT_CPU "proxies and clients"
raise_nofile

# ---------------------------------------------------------------- build ----
! has "$PROXIES" hoard || build_hoard

# ------------------------------------------------------------- work dir ----
start_run fill
set_priority
warm_cpu "$PROXY_CPU"

NOTES=()

# Is anything else running?  A quiet machine is needed for millisecond numbers.
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
    --body-size "$BODY_SIZE" --stale-max-age "$STALE_MAX_AGE" \
    --micro-workers "$MICRO_WORKERS" --micro-ms "$MICRO_MS"
wait_port "$ORIGIN_PORT" origin "$STARTED_PID" "$RUN/origin.log"
hdr="$(curl -sS -o /dev/null -D - "http://$ORIGIN/cold/0/check")" || die "origin does not answer"
grep -qi '^cache-control: *max-age=3600' <<<"$hdr" || die "origin sends no Cache-Control: max-age=3600"

# ---------------------------------------------------------------- proxies ----
declare -A PORT

start_micro_proxies

# ------------------------------------------------------------- helpers ----
client() { # subcommand args... (pinned with the origin)
    "${PRIO[@]}" taskset -c "$CLIENT_CPU" python3 "$BENCH_DIR/fill_client.py" "$@" --body-size "$BODY_SIZE"
}
field() { # "line" key -> value
    local v
    v="$(tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n1)"
    printf '%s' "${v:--}"
}
is_hit() { # proxy cache-status
    case "$1" in
        hoard) [[ "$2" == hoard\;hit* ]] ;;
        *) [ "$2" = HIT ] ;;
    esac
}
ratio() { # a b -> a/b
    awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "n/a"; else if (a / b < 0.1) printf "%.3fx", a / b; else printf "%.2fx", a / b }'
}
msfmt() { # value in ms -> "12.3 ms" (below 10 ms with more digits: "0.056 ms", "4.70 ms")
    case "$1" in ''|-|nan) echo "n/a" ;; *) awk -v v="$1" 'BEGIN { if (v >= 1000) printf "%.2f s", v / 1000; else if (v >= 10) printf "%.1f ms", v; else if (v >= 1) printf "%.2f ms", v; else printf "%.3f ms", v }' ;; esac
}
origin_count() { curl -sS "http://$ORIGIN/__count?prefix=$1"; }
TAG="$(date +%s)"

# Sanity: each proxy must answer, coalesce nothing weird on a single request and
# cache a cacheable response.
for p in $PROXIES; do
    url="http://127.0.0.1:${PORT[$p]}/cold/0/$p-sanity-$TAG"
    curl -sS --fail -o /dev/null "$url" || die "$p: GET $url failed"
    hdr="$(curl -sS --fail -o /dev/null -D - "$url")" || die "$p: GET $url failed"
    st="$(grep -i -E '^(cache-status|x-cache):' <<<"$hdr" | head -n1 | sed -E 's/^[^:]+: *//; s/ //g; s/\r//')"
    is_hit "$p" "$st" || { printf '%s\n' "$hdr" >&2; die "$p: second GET $url was not a cache hit"; }
    [ "$(origin_count "/cold/0/$p-sanity-$TAG")" = 1 ] || die "$p: sanity URL reached the origin more than once"
    log "$p: answers and caches"
done

# Floor: what a client sees with no proxy at all (one request, straight to the origin).
declare -A FLOOR
for dl in $DELAYS $PRIVATE_DELAY; do
    FLOOR[$dl]="$(client burst --proxy "$ORIGIN" --origin "$ORIGIN" --path "/cold/$dl/floor-$TAG" --clients 1 --rounds 3 --fresh --pause 0 \
        | sed -n 's/^ROUND .* max_ttfb_ms=\([0-9.]*\) .*/\1/p' | sort -n | sed -n 2p)"
done


# ------------------------------------------------------- 1. cold keys ----
declare -A C_P50 C_MAX C_LAG C_ORIG C_ERR
if has "$SCENARIOS" cold; then
    for n in $CLIENTS; do
        for dl in $DELAYS hit; do
            for p in $PROXIES; do
                k="$p-$n-$dl"
                f="$RUN/cold-$k.out"
                if [ "$dl" = hit ]; then
                    # Reference: the same burst on a warm key shows what serving
                    # n responses at once costs the proxy and the client.
                    path="/cold/0/$p-hit$n-$TAG"
                    curl -sS --fail -o /dev/null "http://127.0.0.1:${PORT[$p]}$path" || die "$p: GET $path failed"
                    log "cold: $p, $n clients, warm key (reference), $ROUNDS rounds"
                    client burst --proxy "127.0.0.1:${PORT[$p]}" --origin "$ORIGIN" \
                        --path "$path" --clients "$n" --rounds "$ROUNDS" --timeout 30 >"$f" \
                        || die "client failed for $k (see $f)"
                else
                    log "cold: $p, $n clients, origin delay $dl ms, $ROUNDS rounds"
                    client burst --proxy "127.0.0.1:${PORT[$p]}" --origin "$ORIGIN" \
                        --path "/cold/$dl/$p-c$n-$TAG" --clients "$n" --rounds "$ROUNDS" --fresh --check-hit \
                        --timeout 30 >"$f" || die "client failed for $k (see $f)"
                fi
                C_P50[$k]="$(awk '/^DETAIL/ { for (i = 1; i <= NF; i++) if ($i ~ /^ttfb_ms=/) { sub(/^ttfb_ms=/, "", $i); print $i } }' "$f" \
                    | sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "nan" }')"
                C_MAX[$k]="$(awk '/^ROUND/ { for (i = 1; i <= NF; i++) if ($i ~ /^max_ttfb_ms=/) { sub(/^max_ttfb_ms=/, "", $i); if ($i + 0 > m) m = $i + 0 } } END { printf "%.1f", m }' "$f")"
                C_LAG[$k]="$(awk '/^ROUND/ { for (i = 1; i <= NF; i++) { if ($i ~ /^max_ttfb_ms=/) { sub(/^[^=]*=/, "", $i); mx = $i } if ($i ~ /^min_ttfb_ms=/) { sub(/^[^=]*=/, "", $i); mn = $i } } if (mx - mn > l) l = mx - mn } END { printf "%.1f", l }' "$f")"
                C_ORIG[$k]="$(awk -v hit="$([ "$dl" = hit ] && echo 1 || echo 0)" 'BEGIN { prev = 1 } /^ROUND/ { for (i = 1; i <= NF; i++) if ($i ~ /^origin=/) { sub(/^origin=/, "", $i); v = hit ? $i - prev : $i; prev = $i; s = s (s == "" ? "" : " ") v } } END { print s }' "$f")"
                C_ERR[$k]="$(awk '/^ROUND/ { for (i = 1; i <= NF; i++) if ($i ~ /^errors=/) { sub(/^errors=/, "", $i); e += $i } } END { print e + 0 }' "$f")"
                [ "${C_ERR[$k]}" -eq 0 ] || NOTES+=("cold, $p, $n clients, $dl: ${C_ERR[$k]} failed requests (first: $(grep '^ROUND' "$f" | grep -v 'errors=0 ' | head -n1 | sed -n 's/.*first_error=//p'))")
                [ "$dl" = hit ] && continue
                while read -r line; do
                    r="$(field "$line" round)"; o="$(field "$line" origin)"; a="$(field "$line" after)"; mx="$(field "$line" max_ttfb_ms)"
                    is_hit "$p" "$a" || NOTES+=("cold, $p, $n clients, $dl ms, round $r: the request after the burst was not a hit (cache status $a)")
                    if [ "$p" = hoard ]; then
                        [ "$o" = 1 ] || NOTES+=("cold, hoard, $n clients, $dl ms, round $r: $o origin requests for one cold key (expected 1); statuses: $(field "$line" statuses)")
                        awk -v m="$mx" -v d="$dl" 'BEGIN { exit !(m > d + 10) }' \
                            && NOTES+=("cold, hoard, $n clients, $dl ms, round $r: max TTFB $mx ms, more than 10 ms over the origin delay (min $(field "$line" min_ttfb_ms) ms, p50 $(field "$line" p50_ttfb_ms) ms; statuses: $(field "$line" statuses))")
                    fi
                done < <(grep '^ROUND' "$f")
            done
        done
    done
fi

# ------------------------------------------------- 2. uncacheable URL ----
declare -A P_MAX P_P50 P_ORIG P_ERR
if has "$SCENARIOS" private; then
    for p in $PROXIES; do
        f="$RUN/private-$p.out"
        path="/private/$PRIVATE_DELAY/$p-$TAG"
        log "private: $p, $PRIVATE_CLIENTS clients, $PRIVATE_ROUNDS rounds, origin delay $PRIVATE_DELAY ms"
        client burst --proxy "127.0.0.1:${PORT[$p]}" --origin "$ORIGIN" --path "$path" \
            --clients "$PRIVATE_CLIENTS" --rounds "$PRIVATE_ROUNDS" --timeout 60 >"$f" \
            || die "client failed for private/$p (see $f)"
        prev=0
        while read -r line; do
            r="$(field "$line" round)"
            P_MAX[$p-$r]="$(field "$line" max_total_ms)"
            # shellcheck disable=SC2034  # per-round p50, not in the table
            P_P50[$p-$r]="$(field "$line" p50_ttfb_ms)"
            o="$(field "$line" origin)"
            P_ORIG[$p-$r]=$((o - prev)); prev="$o"
            P_ERR[$p-$r]="$(field "$line" errors)"
            [ "${P_ERR[$p-$r]}" = 0 ] || NOTES+=("private, $p, round $r: ${P_ERR[$p-$r]} failed requests ($(field "$line" first_error))")
            if [ "$p" = hoard ] && [ "$r" -gt 1 ]; then
                awk -v m="${P_MAX[$p-$r]}" -v d="$PRIVATE_DELAY" 'BEGIN { exit !(m > d + 20) }' \
                    && NOTES+=("private, hoard, round $r: max latency ${P_MAX[$p-$r]} ms although the URL is known uncacheable (origin delay $PRIVATE_DELAY ms); statuses: $(field "$line" statuses)")
                [ "${P_ORIG[$p-$r]}" = "$PRIVATE_CLIENTS" ] \
                    || NOTES+=("private, hoard, round $r: ${P_ORIG[$p-$r]} origin requests for $PRIVATE_CLIENTS clients (expected $PRIVATE_CLIENTS)")
            fi
        done < <(grep '^ROUND' "$f")
    done
fi

# ---------------------------------------------- 3. stale, keep-alive ----
declare -A S_RES
if has "$SCENARIOS" stale; then
    for p in $PROXIES; do
        f="$RUN/stale-$p.out"
        log "stale: $p, origin delay $STALE_DELAY ms, max-age=$STALE_MAX_AGE, $STALE_COUNT requests on one connection"
        client stale --proxy "127.0.0.1:${PORT[$p]}" --origin "$ORIGIN" --path "/stale/$STALE_DELAY/$p-$TAG" \
            --max-age "$STALE_MAX_AGE" --after "$STALE_AFTER" --count "$STALE_COUNT" \
            --settle "$(awk -v d="$STALE_DELAY" 'BEGIN { print d / 1000 + 1 }')" --timeout 60 >"$f" \
            || die "client failed for stale/$p (see $f)"
        S_RES[$p]="$(grep -m1 '^RESULT' "$f" || true)"
        [ -n "${S_RES[$p]}" ] || die "no result for stale/$p (see $f)"
        e="$(field "${S_RES[$p]}" errors)"
        [ "$e" = 0 ] || NOTES+=("stale, $p: $e errors ($(field "${S_RES[$p]}" first_error))")
        if [ "$p" = hoard ]; then
            for i in $(seq "$STALE_COUNT"); do
                v="$(field "${S_RES[$p]}" "req${i}_ms")"
                awk -v m="$v" 'BEGIN { exit !(m > 50) }' \
                    && NOTES+=("stale, hoard: request $i on the keep-alive connection took $v ms (expected a stale hit in ~1 ms); cache status $(field "${S_RES[$p]}" "req${i}_status")")
            done
            o="$(field "${S_RES[$p]}" origin)"
            [ "$o" = 2 ] || NOTES+=("stale, hoard: $o origin requests (expected 2: the warm-up and one background refresh)")
        fi
    done
fi

# ---------------------------------------------------- 4. microcaching ----
declare -A M_RPS M_P50 M_P99 M_P999 M_MAX M_REQ M_ORIG M_ORPS M_ERR M_STALL
if has "$SCENARIOS" micro; then
    wrk_report_lua "$RUN/report.lua"
    targets="$PROXIES"
    [ "$MICRO_BASELINE" = 1 ] && targets="$targets origin"
    for p in $targets; do
        if [ "$p" = origin ]; then port="$ORIGIN_PORT"; else port="${PORT[$p]}"; fi
        path="/micro/$p-$TAG"
        url="http://127.0.0.1:$port$path"
        curl -sS --fail -o /dev/null "$url" || die "$p: GET $url failed"
        sleep 1.2
        c0="$(origin_count "$path")"
        f="$RUN/micro-$p.wrk"
        log "micro: $p, wrk -t1 -c$MICRO_CONNS -d${MICRO_DURATION}s (app: $MICRO_WORKERS workers x $MICRO_MS ms)"
        # The stall probe shares the proxy's CPU: a slow response that
        # matches its worst wake-up was the machine's stall, not the proxy's.
        "${PRIO[@]}" taskset -c "$PROXY_CPU" python3 "$BENCH_DIR/stall_probe.py" "$MICRO_DURATION" >"$f.stall" 2>&1 &
        probe=$!
        "${PRIO[@]}" taskset -c "$CLIENT_CPU" wrk -t1 -c"$MICRO_CONNS" -d"${MICRO_DURATION}s" --latency --timeout 10s \
            -s "$RUN/report.lua" "$url" >"$f" 2>&1 || { cat "$f" >&2; die "wrk failed for $url"; }
        wait "$probe" || true
        M_STALL[$p]="$(sed -n 's/^STALL max_ms=\([0-9.]*\).*/\1/p' "$f.stall")"
        sleep 0.5
        c1="$(origin_count "$path")"
        line="$(grep '^BENCH ' "$f" || true)"
        [ -n "$line" ] || { cat "$f" >&2; die "could not parse wrk output for $url"; }
        req="$(field "${line#BENCH }" requests)"; dur="$(field "${line#BENCH }" duration_us)"
        M_REQ[$p]="$req"
        M_RPS[$p]="$(awk -v r="$req" -v d="$dur" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
        M_P50[$p]="$(awk -v u="$(field "${line#BENCH }" p50_us)" 'BEGIN { printf "%.2f", u / 1000 }')"
        M_P99[$p]="$(awk -v u="$(field "${line#BENCH }" p99_us)" 'BEGIN { printf "%.2f", u / 1000 }')"
        M_P999[$p]="$(awk -v u="$(field "${line#BENCH }" p999_us)" 'BEGIN { printf "%.2f", u / 1000 }')"
        M_MAX[$p]="$(awk -v u="$(field "${line#BENCH }" max_us)" 'BEGIN { printf "%.2f", u / 1000 }')"
        M_ORIG[$p]=$((c1 - c0))
        M_ORPS[$p]="$(awk -v o="${M_ORIG[$p]}" -v d="$dur" 'BEGIN { printf "%.2f", o / (d / 1e6) }')"
        errs=""
        for v in connect read write status timeout; do
            [ "$(field "${line#BENCH }" "$v")" = 0 ] || errs+=" $v=$(field "${line#BENCH }" "$v")"
        done
        M_ERR[$p]="${errs:- 0}"
        [ -z "$errs" ] || NOTES+=("micro, $p: wrk reported errors:$errs")
        if [ "$p" = hoard ]; then
            awk -v o="${M_ORPS[$p]}" 'BEGIN { exit !(o > 1.5) }' \
                && NOTES+=("micro, hoard: ${M_ORPS[$p]} origin requests/s with a 1 s TTL (expected about 1/s)")
            awk -v m="${M_MAX[$p]}" -v d="$MICRO_MS" 'BEGIN { exit !(m >= d) }' \
                && NOTES+=("micro, hoard: max latency ${M_MAX[$p]} ms, i.e. some client waited for the app ($MICRO_MS ms) although stale-while-revalidate should hide refreshes")
            # Every response is a hit or a stale hit: none should wait long.
            if awk -v m="${M_MAX[$p]}" -v d="$MICRO_MAX_MS" 'BEGIN { exit !(m >= d) }'; then
                if awk -v m="${M_MAX[$p]}" -v s="${M_STALL[$p]:-0}" 'BEGIN { exit !(s >= m * 0.8) }'; then
                    NOTES+=("micro, hoard: max latency ${M_MAX[$p]} ms, over the ${MICRO_MAX_MS} ms target, but the machine itself stalled ${M_STALL[$p]} ms in the same run (stall probe on the proxy's CPU)")
                else
                    NOTES+=("micro, hoard: max latency ${M_MAX[$p]} ms, over the ${MICRO_MAX_MS} ms no-stall target while the machine's worst stall was ${M_STALL[$p]:-?} ms: a stall of hoard's own")
                fi
            fi
        fi
    done
fi


# ----------------------------------------------------------------- report ----
report_start fill
both=0; has "$PROXIES" hoard && has "$PROXIES" nginx && both=1
hv=0; has "$PROXIES" varnish && hv=1
ORDER=""; for p in hoard nginx varnish; do has "$PROXIES" "$p" && ORDER+="$p "; done
{
    echo "# hoard cache-fill benchmark ($STAMP)"
    echo
    machine_line
    has "$PROXIES" hoard && echo "- hoard: git $git_rev (binary built $(hoard_built)), ${HOARD_ARGS[*]}"
    has "$PROXIES" nginx && echo "- nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //'), 1 worker, proxy_cache_lock on, proxy_cache_use_stale updating, proxy_cache_background_update on, proxy_cache_valid 200 1s"
    has "$PROXIES" varnish && echo "- varnish: $(varnishd -V 2>&1 | head -n1 | sed -E 's/^varnishd \(([^ ]+) .*/\1/'), default thread pools, grace ${SWR}s, ttl 1s for the micro app"
    echo "- proxies pinned to CPU $PROXY_CPU; origin (fill_origin.py), client (fill_client.py) and wrk pinned to CPU $CLIENT_CPU; ${BODY_SIZE}-byte bodies"
    echo "- no proxy (one request straight to the origin, median of 3): TTFB$(for dl in "${!FLOOR[@]}"; do printf ' %s ms at %s ms delay;' "${FLOOR[$dl]}" "$dl"; done | sed 's/; *$//')"
    echo "- other processes before the run: $busy% of one core"
    [ "${NICE:-0}" = 0 ] || echo "- proxies, origin and clients at nice $NICE (and this session's autogroup)"
    [ "${WARM_CPU:-0}" = 1 ] && echo "- CPU $PROXY_CPU kept from idling by a SCHED_IDLE busy loop (WARM_CPU=1)"

    if has "$SCENARIOS" cold; then
        echo
        echo "## 1. Cold key: simultaneous requests (coalescing)"
        echo
        echo "$ROUNDS rounds per row, each on a fresh URL (Cache-Control: max-age=3600). TTFB = time to first byte of each"
        echo "request; p50 over all requests of all rounds, max = slowest request of any round, spread = largest max − min TTFB"
        echo "within a round (how long the last waiter trails the first response); origin = origin requests in each round."
        echo "The *warm key* rows are the same burst on a cached key: the floor set by serving n responses at once (proxy + client)."
        echo
        echo "| clients | origin delay | proxy | p50 TTFB | max TTFB | spread | origin |"
        echo "|---:|---:|---|---:|---:|---:|---|"
        for n in $CLIENTS; do
            for dl in $DELAYS hit; do
                d="$dl ms"; [ "$dl" = hit ] && d="warm key"
                for p in $ORDER; do
                    k="$p-$n-$dl"
                    echo "| $n | $d | $p | $(msfmt "${C_P50[$k]}") | $(msfmt "${C_MAX[$k]}") | $(msfmt "${C_LAG[$k]}") | ${C_ORIG[$k]} |"
                done
                if [ "$both" = 1 ]; then
                    echo "| $n | $d | **hoard/nginx** | $(ratio "${C_P50[hoard-$n-$dl]}" "${C_P50[nginx-$n-$dl]}") | **$(ratio "${C_MAX[hoard-$n-$dl]}" "${C_MAX[nginx-$n-$dl]}")** | | |"
                fi
                if has "$PROXIES" hoard && [ "$hv" = 1 ]; then
                    echo "| $n | $d | hoard/varnish | $(ratio "${C_P50[hoard-$n-$dl]}" "${C_P50[varnish-$n-$dl]}") | $(ratio "${C_MAX[hoard-$n-$dl]}" "${C_MAX[varnish-$n-$dl]}") | | |"
                fi
            done
        done
    fi

    if has "$SCENARIOS" private; then
        echo
        echo "## 2. Uncacheable URL (Cache-Control: private)"
        echo
        echo "$PRIVATE_CLIENTS simultaneous clients per round, the same URL every round, origin delay $PRIVATE_DELAY ms."
        echo "max = slowest complete response of the round; origin = origin requests during the round."
        echo
        hdr="| round |"; sep="|---:|"
        for p in $ORDER; do hdr+=" $p max | $p origin |"; sep+="---:|---:|"; done
        [ "$both" = 1 ] && { hdr+=" max hoard/nginx |"; sep+="---:|"; }
        echo "$hdr"; echo "$sep"
        for r in $(seq "$PRIVATE_ROUNDS"); do
            row="| $r |"
            for p in $ORDER; do row+=" $(msfmt "${P_MAX[$p-$r]:-}") | ${P_ORIG[$p-$r]:-n/a} |"; done
            [ "$both" = 1 ] && row+=" **$(ratio "${P_MAX[hoard-$r]:-}" "${P_MAX[nginx-$r]:-}")** |"
            echo "$row"
        done
    fi

    if has "$SCENARIOS" stale; then
        echo
        echo "## 3. Expired object, one keep-alive connection (stale-while-revalidate)"
        echo
        echo "Origin takes $STALE_DELAY ms and sends Cache-Control: max-age=$STALE_MAX_AGE. One warm-up request, then,"
        echo "${STALE_AFTER} s after expiry, $STALE_COUNT requests back to back on one new keep-alive connection. Latency to the last body byte;"
        echo "cache status in brackets (hoard: Cache-Status, nginx/varnish: X-Cache). origin = origin requests in total, counted"
        echo "$(awk -v d="$STALE_DELAY" 'BEGIN { print d / 1000 + 1 }') s after the last request (warm-up + refreshes)."
        echo
        hdr="| request |"; sep="|---|"
        for p in $ORDER; do hdr+=" $p |"; sep+="---:|"; done
        [ "$both" = 1 ] && { hdr+=" hoard/nginx |"; sep+="---:|"; }
        echo "$hdr"; echo "$sep"
        row="| warm-up (miss) |"
        for p in $ORDER; do row+=" $(msfmt "$(field "${S_RES[$p]}" warm_ms)") |"; done
        [ "$both" = 1 ] && row+=" |"
        echo "$row"
        for i in $(seq "$STALE_COUNT"); do
            row="| $i |"
            for p in $ORDER; do
                row+=" $(msfmt "$(field "${S_RES[$p]}" "req${i}_ms")") ($(field "${S_RES[$p]}" "req${i}_status" | sed 's/|/\\|/g')) |"
            done
            [ "$both" = 1 ] && row+=" **$(ratio "$(field "${S_RES[hoard]}" "req${i}_ms")" "$(field "${S_RES[nginx]}" "req${i}_ms")")** |"
            echo "$row"
        done
        row="| origin |"
        for p in $ORDER; do row+=" $(field "${S_RES[$p]}" origin) |"; done
        [ "$both" = 1 ] && row+=" |"
        echo "$row"
    fi

    if has "$SCENARIOS" micro; then
        echo
        echo "## 4. Microcaching: 1 s TTL in front of a slow app"
        echo
        echo "App: $MICRO_WORKERS workers x $MICRO_MS ms (at most $(awk -v w="$MICRO_WORKERS" -v m="$MICRO_MS" 'BEGIN { printf "%.0f", w * 1000 / m }') req/s), no Cache-Control; 1 s TTL and ${SWR} s of stale serving in each proxy."
        echo "Load: wrk -t1 -c$MICRO_CONNS -d${MICRO_DURATION}s --latency on one URL. origin = requests that reached the app during the run."
        echo
        echo "machine stall = the latest wake-up of a 1 ms sleep on the proxy's CPU during that run (\`stall_probe.py\`): a max near it is the machine's, not the proxy's."
        echo
        echo "| target | requests | req/s | p50 | p99 | p99.9 | max | machine stall | origin | origin req/s | errors |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        for p in $ORDER $( [ "$MICRO_BASELINE" = 1 ] && echo origin ); do
            name="$p"; [ "$p" = origin ] && name="no cache (app direct)"
            echo "| $name | ${M_REQ[$p]} | ${M_RPS[$p]} | $(msfmt "${M_P50[$p]}") | $(msfmt "${M_P99[$p]}") | $(msfmt "${M_P999[$p]}") | $(msfmt "${M_MAX[$p]}") | $(msfmt "${M_STALL[$p]:-0}") | ${M_ORIG[$p]} | ${M_ORPS[$p]} |${M_ERR[$p]} |"
        done
        if has "$PROXIES" hoard && [ "$hv" = 1 ]; then
            echo "| **hoard/varnish** | | $(ratio "${M_RPS[hoard]}" "${M_RPS[varnish]}") | $(ratio "${M_P50[hoard]}" "${M_P50[varnish]}") | **$(ratio "${M_P99[hoard]}" "${M_P99[varnish]}")** | **$(ratio "${M_P999[hoard]}" "${M_P999[varnish]}")** | $(ratio "${M_MAX[hoard]}" "${M_MAX[varnish]}") | | | | |"
        fi
        if [ "$both" = 1 ]; then
            echo "| **hoard/nginx** | | **$(ratio "${M_RPS[hoard]}" "${M_RPS[nginx]}")** | $(ratio "${M_P50[hoard]}" "${M_P50[nginx]}") | **$(ratio "${M_P99[hoard]}" "${M_P99[nginx]}")** | $(ratio "${M_P999[hoard]}" "${M_P999[nginx]}") | $(ratio "${M_MAX[hoard]}" "${M_MAX[nginx]}") | | $(ratio "${M_ORIG[hoard]}" "${M_ORIG[nginx]}") | | |"
        fi
    fi

    if [ "${#NOTES[@]}" -gt 0 ]; then
        echo
        echo "Notes (unexpected results):"
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
} >"$REPORT"

report_done
