#!/usr/bin/env bash
# Connection-exhaustion benchmark: 1 KiB cache hits while idle and slow-loris
# connections are held open against the proxy; hoard vs. nginx proxy_cache.
#
# For each proxy: a baseline wrk run on a warm 1 KiB hit, and the same wrk
# run while bench/attack_hold.py holds N_IDLE connections that send nothing
# and N_LORIS connections that send an unfinished request head and then one
# header line every LORIS_INTERVAL seconds.  Reported: hit req/s and p99
# with and without the attack and their ratio (target: within 10 %), the
# proxy's resident memory per idle and per slow-loris connection (VmRSS
# growth while they are opened), and how many attack connections the proxy
# closed and still held when the wrk run ended (hoard closes a connection
# that has not sent a complete head within server.header_read_timeout, 10 s
# by default; nginx after client_header_timeout, 60 s by default).  By
# default the attacker replaces every connection the proxy closes.  See
# bench/README.md.
#
# Environment knobs (all optional):
#   DURATION=10        seconds per wrk run
#   CONNS=64           wrk connections
#   WRK_THREADS=2      wrk threads
#   RUNS=3             baseline and attack runs per proxy, interleaved; median shown
#   N_IDLE=5000        idle attack connections (connect, send nothing)
#   IDLE_FIRST=N_IDLE/10   idle connections opened in a first step of their own
#                      (it absorbs memory kept from the last run; RSS per idle
#                      connection is measured over the other ones)
#   N_LORIS=500        slow-loris attack connections
#   LORIS_INTERVAL=3   seconds between two header lines of a slow-loris connection
#   RECONNECT=1        the attacker replaces each connection the proxy closes
#                      (0: it only counts them)
#   PROXIES="hoard nginx"   which proxies to run
#   NGINX_WORKER_CONNECTIONS=16384   nginx worker_connections (lib.sh default: 4096)
#   NGINX_CLIENT_HEADER_TIMEOUT=       nginx client_header_timeout (default: nginx's, 60s;
#                      10s makes nginx close the attack connections as hoard does)
#   HOARD_HEADER_READ_TIMEOUT=  HOARD_MAX_CONNECTIONS=   set these server
#                      keys in hoard's config file (default: hoard's defaults)
#   QUIET_WAIT=0       before each run, wait up to this many seconds for the
#                      machine to be quiet (other processes under 10% of a core)
#   PROXY_CPU=0 WRK_CPU=1   CPUs for the proxy and for wrk
#   ATTACK_CPU=$WRK_CPU      CPU for the attacker (on 3+ cores, give it its own)
#   HOARD_BIN=path     use this binary instead of building target/release/hoard
#   SKIP_BUILD=1       do not run cargo build (HOARD_BIN or an existing binary)
#   KEEP=1             keep bench/out/attack.* (configs, logs, raw output)
#   BASE_PORT=18480    first loopback port to try
set -euo pipefail

BENCH_NAME=attack
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
CONNS="${CONNS:-64}"
WRK_THREADS="${WRK_THREADS:-2}"
RUNS="${RUNS:-3}"
N_IDLE="${N_IDLE:-5000}"
N_LORIS="${N_LORIS:-500}"
IDLE_FIRST="${IDLE_FIRST:-$((N_IDLE / 10))}"
LORIS_INTERVAL="${LORIS_INTERVAL:-3}"
RECONNECT="${RECONNECT:-1}"
PROXIES="${PROXIES:-hoard nginx}"
NGINX_WORKER_CONNECTIONS="${NGINX_WORKER_CONNECTIONS:-16384}"
NGINX_CLIENT_HEADER_TIMEOUT="${NGINX_CLIENT_HEADER_TIMEOUT:-}"
HOARD_HEADER_READ_TIMEOUT="${HOARD_HEADER_READ_TIMEOUT:-}"
HOARD_MAX_CONNECTIONS="${HOARD_MAX_CONNECTIONS:-}"
QUIET_WAIT="${QUIET_WAIT:-0}"
PROXY_CPU="${PROXY_CPU:-0}"
WRK_CPU="${WRK_CPU:-1}"
ATTACK_CPU="${ATTACK_CPU:-$WRK_CPU}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
export NGINX_WORKER_CONNECTIONS

NEXT_PORT="${BASE_PORT:-18480}"

for v in DURATION CONNS WRK_THREADS RUNS N_IDLE IDLE_FIRST N_LORIS LORIS_INTERVAL NGINX_WORKER_CONNECTIONS QUIET_WAIT; do
    require_whole "$v"
done
require_positive DURATION CONNS WRK_THREADS RUNS LORIS_INTERVAL
case "$RECONNECT" in 0|1) ;; *) die "RECONNECT must be 0 or 1" ;; esac
[ -z "$HOARD_MAX_CONNECTIONS" ] || require_whole HOARD_MAX_CONNECTIONS
for p in $PROXIES; do
    case "$p" in hoard|nginx) ;; *) die "unknown proxy '$p' in PROXIES (hoard nginx)" ;; esac
done

# ---------------------------------------------------------------- tools ----
ensure_tools nginx:nginx-light wrk:wrk curl:curl taskset:util-linux python3:python3
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "python3 >= 3.11 needed"
check_cpus PROXY_CPU WRK_CPU "proxy and wrk"
check_cpus PROXY_CPU ATTACK_CPU "proxy and attacker"
raise_nofile
NEED_FDS=$((N_IDLE + N_LORIS + CONNS + 256))
[ "$NOFILE" -ge "$NEED_FDS" ] || die "ulimit -n is $NOFILE, need at least $NEED_FDS (raise the hard limit)"
if has "$PROXIES" nginx && [ "$NGINX_WORKER_CONNECTIONS" -gt "$NOFILE" ]; then
    die "NGINX_WORKER_CONNECTIONS ($NGINX_WORKER_CONNECTIONS) exceeds worker_rlimit_nofile ($NOFILE)"
fi
if has "$PROXIES" hoard; then build_hoard; fi

# ------------------------------------------------------------- work dir ----
start_run attack
report_start attack
RAW="$OUT_DIR/attack-$STAMP.raw.txt"
: >"$RAW"
raw() { printf '%s\n' "$*" >>"$RAW"; }
TIMEFORMAT='%R %U %S'

now() { echo "$EPOCHREALTIME"; }
field() { sed -nE "s/.*[ ]$2=([0-9.]+).*/\1/p" <<<" $1"; } # "line" key -> value

cpu_ticks() { # pid... -> utime+stime summed, in clock ticks
    local p s n=0
    for p in "$@"; do
        s="$(cat "/proc/$p/stat")" || die "process $p vanished"
        s="${s##*) }"
        n=$((n + $(awk '{ print $12 + $13 }' <<<"$s")))
    done
    echo "$n"
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

metric() { # admin-port 'name{labels}' -> value (empty if absent)
    curl -sS -m 10 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m && !seen { printf "%.0f\n", $2; seen = 1 }'
}

# --------------------------------------------------------------- origin ----
free_port ORIGIN_PORT
DOCROOT="$RUN/www"
mkdir -p "$DOCROOT"
head -c 1024 /dev/urandom >"$DOCROOT/1k.bin"
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
hdr="$(curl -sS -o /dev/null -D - "http://127.0.0.1:$ORIGIN_PORT/1k.bin")"
grep -qi '^cache-control: *max-age=3600' <<<"$hdr" || die "origin does not send Cache-Control: max-age=3600 for /1k.bin"

# -------------------------------------------------------------- proxies ----
declare -A PORT SRV_PIDS ADMIN
NOTES=()

if has "$PROXIES" hoard; then
    free_port HOARD_PORT
    free_port HOARD_ADMIN
    mkdir -p "$RUN/hoard"
    # Defaults for every limit (max_connections 10000, header_read_timeout
    # 10s) unless the knobs set them; one worker thread as in hit.sh.
    {
        echo "[server]"
        echo "threads = 1"
        [ -z "$HOARD_HEADER_READ_TIMEOUT" ] || echo "header_read_timeout = \"$HOARD_HEADER_READ_TIMEOUT\""
        [ -z "$HOARD_MAX_CONNECTIONS" ] || echo "max_connections = $HOARD_MAX_CONNECTIONS"
        echo
        echo "[[listener]]"
        echo "address = \"127.0.0.1:$HOARD_PORT\""
        echo
        echo "[cache]"
        echo "memory_size = \"256MiB\""
        echo
        echo "[upstream.origin]"
        echo "servers = [\"http://127.0.0.1:$ORIGIN_PORT\"]"
        echo
        echo "[admin]"
        echo "address = \"127.0.0.1:$HOARD_ADMIN\""
    } >"$RUN/hoard.toml"
    "$HOARD_BIN" check --config "$RUN/hoard.toml" >"$RUN/hoard/check.log" 2>&1 \
        || { cat "$RUN/hoard/check.log" >&2; die "hoard check rejected $RUN/hoard.toml"; }
    log "hoard on 127.0.0.1:$HOARD_PORT (CPU $PROXY_CPU, threads 1, admin 127.0.0.1:$HOARD_ADMIN)"
    spawn "$RUN/hoard/stdout.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" run --config "$RUN/hoard.toml"
    wait_port "$HOARD_PORT" hoard "$STARTED_PID" "$RUN/hoard/stdout.log"
    wait_port "$HOARD_ADMIN" "hoard admin" "$STARTED_PID" "$RUN/hoard/stdout.log"
    PORT[hoard]="$HOARD_PORT"
    SRV_PIDS[hoard]="$STARTED_PID"
    ADMIN[hoard]="$HOARD_ADMIN"
fi

if has "$PROXIES" nginx; then
    free_port NGINX_PORT
    log "nginx proxy_cache on 127.0.0.1:$NGINX_PORT (CPU $PROXY_CPU, worker_connections $NGINX_WORKER_CONNECTIONS, worker_rlimit_nofile $NOFILE)"
    start_nginx_proxy_cache nginx "$NGINX_PORT" \
        "access_log off;${NGINX_CLIENT_HEADER_TIMEOUT:+ client_header_timeout $NGINX_CLIENT_HEADER_TIMEOUT;}"
    PORT[nginx]="$NGINX_PORT"
    SRV_PIDS[nginx]="$(for c in $(pgrep -P "$NGINX_MASTER"); do
        if tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null | grep -q 'worker process'; then echo "$c"; fi
    done | tr '\n' ' ')"
    [ -n "${SRV_PIDS[nginx]// /}" ] || die "no nginx worker process found"
fi

is_hit() { grep -Eqi '^(cache-status:.*hoard; *hit|x-cache: *hit)' <<<"$1"; }
for p in $PROXIES; do
    url="http://127.0.0.1:${PORT[$p]}/1k.bin"
    for _ in 1 2; do
        hdr="$(curl -sS --fail -o "$RUN/$p.body" -D - "$url")" || die "$p: GET $url failed"
        cmp -s "$RUN/$p.body" "$DOCROOT/1k.bin" || die "$p: body of $url differs from the origin's file"
    done
    is_hit "$hdr" || { printf '%s\n' "$hdr" >&2; die "$p: second GET $url was not a cache hit (headers above)"; }
    log "$p: /1k.bin warm, second request was a hit"
done

# ------------------------------------------------------------- helpers ----
alive() { # proxy: every server process still there
    local pid
    for pid in ${SRV_PIDS[$1]}; do
        kill -0 "$pid" 2>/dev/null || die "$1: process $pid is gone (crashed?); see $RUN"
    done
}
rss_kb() { # proxy -> VmRSS in kB (nginx: summed over its worker processes)
    local pid n=0 v
    alive "$1"
    for pid in ${SRV_PIDS[$1]}; do
        v="$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")"
        n=$((n + v))
    done
    echo "$n"
}
nfd() { # proxy -> open file descriptors (nginx: workers)
    local pid n=0
    alive "$1"
    for pid in ${SRV_PIDS[$1]}; do
        n=$((n + $(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)))
    done
    echo "$n"
}
wait_fds() { # proxy cmp target secs: wait until nfd cmp target (ge|le); 0 if reached
    local i n
    for i in $(seq $(( $4 * 10 ))); do
        n="$(nfd "$1")"
        if [ "$2" = ge ]; then [ "$n" -ge "$3" ] && return 0; else [ "$n" -le "$3" ] && return 0; fi
        sleep 0.1
    done
    return 1
}
wait_line() { # file prefix pid secs -> the first line starting with prefix
    local i l
    for i in $(seq $(( $4 * 10 ))); do
        l="$(grep -m1 "^$2 " "$1" || true)"
        if [ -n "$l" ]; then echo "$l"; return 0; fi
        kill -0 "$3" 2>/dev/null || { cat "$1" >&2; die "the attacker exited early (see $1)"; }
        sleep 0.1
    done
    cat "$1" >&2
    die "no '$2' line from the attacker within $4 s"
}
sockstat() { awk '$1 == "TCP:" { $1 = ""; print }' /proc/net/sockstat; }
hoard_counters() { # -> "refused=.. silent=.. accepted=.. closed=.. client_errors=.."
    local c s=""
    for c in connections_refused connections_silent connections_accepted connections_closed client_errors; do
        s+="${c#connections_}=$(metric "${ADMIN[hoard]}" "hoard_events_total{event=\"$c\"}") "
    done
    echo "$s"
}

wrk_report_lua "$RUN/report.lua"
declare -A R_RPS R_P50 R_P99 R_MAX R_REQ R_CPU R_ERR R_RANGE R_OCPU R_PCPU R_WCPU R_MID
declare -A A_RSS_IDLE A_RSS_LORIS A_IDLE_OPEN A_LORIS_OPEN A_END A_CLOSED A_FIRST A_HOLD A_ATK_CPU A_COUNTERS A_RSS_CHAIN A_NGX_WARN

wrk_run() { # key proxy [attacker-pid]: one wrk run on the hit -> R_*[key]
    local k="$1" p="$2" apid="${3:-}" f="$RUN/${1//#/.}" t0 t1 s0 s1 a0=0 a1=0 line req dur errs v real user sys
    local url="http://127.0.0.1:${PORT[$p]}/1k.bin"
    log "$k: wrk -t$WRK_THREADS -c$CONNS -d${DURATION}s"
    # shellcheck disable=SC2086
    t0="$(cpu_ticks ${SRV_PIDS[$p]})"
    [ -z "$apid" ] || a0="$(cpu_ticks "$apid")"
    s0="$(sys_busy)"
    { time taskset -c "$WRK_CPU" wrk -t"$WRK_THREADS" -c"$CONNS" -d"${DURATION}s" --latency \
          -s "$RUN/report.lua" "$url" >"$f.wrk" 2>&1; } 2>"$f.time" \
        || { cat "$f.wrk" >&2; die "wrk failed for $url"; }
    # shellcheck disable=SC2086
    t1="$(cpu_ticks ${SRV_PIDS[$p]})"
    [ -z "$apid" ] || a1="$(cpu_ticks "$apid")"
    s1="$(sys_busy)"
    raw "--- $k: wrk -t$WRK_THREADS -c$CONNS -d${DURATION}s --latency $url"
    cat "$f.wrk" >>"$RAW"
    line="$(grep '^BENCH ' "$f.wrk" || true)"
    [ -n "$line" ] || { cat "$f.wrk" >&2; die "could not parse wrk output for $url"; }
    req="$(field "$line" requests)"; dur="$(field "$line" duration_us)"
    [ "$req" -gt 0 ] || die "$k: no requests completed"
    R_REQ[$k]="$req"
    R_RPS[$k]="$(awk -v r="$req" -v d="$dur" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
    R_P50[$k]="$(field "$line" p50_us)"
    R_P99[$k]="$(field "$line" p99_us)"
    R_MAX[$k]="$(field "$line" max_us)"
    errs=""
    for v in connect read write status timeout; do
        [ "$(field "$line" "$v")" -eq 0 ] || errs+="${errs:+ }$v=$(field "$line" "$v")"
    done
    R_ERR[$k]="${errs:-0}"
    [ -z "$errs" ] || NOTES+=("$k: wrk reported errors: $errs")
    read -r real user sys <"$f.time"
    R_CPU[$k]="$(awk -v a="$t0" -v b="$t1" -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.2f", (b - a) / hz * 1e6 / n }')"
    R_PCPU[$k]="$(awk -v a="$t0" -v b="$t1" -v hz="$CLK_TCK" -v w="$real" 'BEGIN { printf "%.0f", (b - a) / hz / w * 100 }')"
    R_WCPU[$k]="$(awk -v u="$user" -v s="$sys" -v w="$real" 'BEGIN { printf "%.0f", (u + s) / w * 100 }')"
    ATK_CPU="$(awk -v a="$a0" -v b="$a1" -v hz="$CLK_TCK" -v w="$real" 'BEGIN { printf "%.0f", (b - a) / hz / w * 100 }')"
    # Everything else on the machine: busy time minus proxy, wrk and attacker.
    R_OCPU[$k]="$(awk -v a="$s0" -v b="$s1" -v p="$((t1 - t0))" -v x="$((a1 - a0))" -v hz="$CLK_TCK" \
        -v u="$user" -v s="$sys" -v w="$real" \
        'BEGIN { o = ((b - a) - p - x) / hz - (u + s); if (o < 0) o = 0; printf "%.0f", o / w * 100 }')"
    if [ "${R_OCPU[$k]}" -ge 10 ]; then
        NOTES+=("$k: other processes used ${R_OCPU[$k]}% of a core during the run; the machine was not quiet, expect noise")
    fi
    raw "$k: proxy cpu ${R_PCPU[$k]}%, wrk cpu ${R_WCPU[$k]}%, attacker cpu $ATK_CPU%, other cpu ${R_OCPU[$k]}% (of one core)"
}

# One attack round: open the idle connections, measure RSS, open the
# slow-loris connections, measure RSS, run wrk while they are held, stop
# the attacker and wait until the proxy has let go of the sockets.
attack_run() { # proxy run
    local p="$1" r="$2" k="$1-attack#$2" f="$RUN/$1-attack.$2" fd rss rss3 i kind count
    local apid line got t_open="" t_end res c0 c1 w0 w1 n_idle=0 n_loris=0 chain
    local steps=() rss_at=() open_at=() kind_at=()
    # The idle connections are opened in two steps: the first makes the
    # allocator reuse what the last wrk run freed, the second gives the
    # memory per idle connection.
    i="$(( IDLE_FIRST < N_IDLE ? IDLE_FIRST : N_IDLE ))"
    [ "$i" -eq 0 ] || steps+=("idle $i")
    [ $((N_IDLE - i)) -eq 0 ] || steps+=("idle $((N_IDLE - i))")
    [ "$N_LORIS" -eq 0 ] || steps+=("loris $N_LORIS")
    [ "${#steps[@]}" -gt 0 ] || die "N_IDLE and N_LORIS are both 0"
    wait_quiet
    sleep 1
    fd="$(nfd "$p")"
    rss="$(rss_kb "$p")"
    FD0="$fd"; rss_at=("$rss"); chain="$rss"
    [ "$p" != hoard ] || c0="$(hoard_counters)"
    [ "$p" != nginx ] || w0="$(grep -c 'worker_connections are not enough' "$RUN/nginx/error.log" || true)"
    raw "--- $k: proxy fds $fd, VmRSS $rss kB, TCP sockstat:$(sockstat)"
    spawn "$f.log" taskset -c "$ATTACK_CPU" python3 "$BENCH_DIR/attack_hold.py" \
        --port "${PORT[$p]}" --idle "$N_IDLE" --idle-first "$IDLE_FIRST" --loris "$N_LORIS" \
        --interval "$LORIS_INTERVAL" --reconnect "$RECONNECT" --path /1k.bin
    apid="$STARTED_PID"
    for i in "${!steps[@]}"; do
        read -r kind count <<<"${steps[$i]}"
        log "$k: opening $count $kind connections"
        [ "$i" -eq 0 ] || kill -USR1 "$apid"
        line="$(wait_line "$f.log" "STEP n=$((i + 1))" "$apid" 120)"
        [ -n "$t_open" ] || t_open="$(now)"
        got="$(field "$line" open)"
        [ "$got" -eq "$count" ] || NOTES+=("$k: only $got of $count $kind connections could be opened")
        # connect() returns once the kernel has queued the connection: wait
        # until the proxy has accepted them (its descriptor count).
        wait_fds "$p" ge $((fd + got)) 20 \
            || NOTES+=("$k: after opening $got $kind connections the proxy held only $(( $(nfd "$p") - fd )) more descriptors")
        sleep 0.5
        fd="$(nfd "$p")"
        rss="$(rss_kb "$p")"
        rss_at+=("$rss"); open_at+=("$got"); kind_at+=("$kind"); chain+=" → $rss"
        if [ "$kind" = idle ]; then n_idle=$((n_idle + got)); else n_loris=$((n_loris + got)); fi
        raw "$k: $line; proxy fds $fd, VmRSS $rss kB, TCP sockstat:$(sockstat)"
    done
    per_conn() { # step -> bytes of RSS per connection opened in that step
        awk -v a="${rss_at[$1]}" -v b="${rss_at[$1 + 1]}" -v n="${open_at[$1]}" \
            'BEGIN { if (n > 0) printf "%.0f", (b - a) * 1024 / n; else print "n/a" }'
    }
    A_RSS_IDLE[$k]="n/a"; A_RSS_LORIS[$k]="n/a"
    for i in "${!kind_at[@]}"; do
        # the last idle step counts (the second one when there are two)
        if [ "${kind_at[$i]}" = idle ]; then A_RSS_IDLE[$k]="$(per_conn "$i")"; else A_RSS_LORIS[$k]="$(per_conn "$i")"; fi
    done
    A_RSS_CHAIN[$k]="$chain"
    A_IDLE_OPEN[$k]="$n_idle"; A_LORIS_OPEN[$k]="$n_loris"
    log "$k: $n_idle idle + $n_loris slow-loris held; VmRSS $chain kB (${A_RSS_IDLE[$k]} B per idle, ${A_RSS_LORIS[$k]} B per slow-loris connection)"

    wrk_run "$k" "$p" "$apid"
    t_end="$(now)"
    A_ATK_CPU[$k]="$ATK_CPU"
    if [ "$ATTACK_CPU" = "$WRK_CPU" ] && [ "$ATK_CPU" -ge 10 ]; then
        NOTES+=("$k: the attacker used $ATK_CPU% of wrk's CPU (reconnecting what the proxy closed); wrk had ${R_WCPU[$k]}% of it: part of any req/s loss is the client's")
    fi
    kill -TERM "$apid" 2>/dev/null || true
    res="$(wait_line "$f.log" RESULT "$apid" 30 2>/dev/null || true)"
    wait "$apid" 2>/dev/null || true
    stop_pid "$apid"
    [ -n "$res" ] || die "$k: no RESULT line from the attacker (see $f.log)"
    A_HOLD[$k]="$(awk -v a="$t_open" -v b="$t_end" 'BEGIN { printf "%.1f", b - a }')"
    A_END[$k]="$(field "$res" idle_open)/$(field "$res" loris_open)"
    A_FIRST[$k]="$(field "$res" first_idle_open)/$(field "$res" first_loris_open)"
    A_CLOSED[$k]="$(field "$res" idle_closed)/$(field "$res" loris_closed)"
    rss3="$(rss_kb "$p")"
    A_RSS_CHAIN[$k]+=" → $rss3"
    if [ "$p" = hoard ]; then
        c1="$(hoard_counters)"
        A_COUNTERS[$k]="before: $c0; after: $c1"
        local refused0 refused1
        refused0="$(field "$c0" refused)"; refused1="$(field "$c1" refused)"
        [ "$refused1" = "$refused0" ] || NOTES+=("$k: hoard refused $((refused1 - refused0)) connections (max_connections reached)")
    fi
    if [ "$p" = nginx ]; then
        w1="$(grep -c 'worker_connections are not enough' "$RUN/nginx/error.log" || true)"
        A_NGX_WARN[$k]="$((w1 - w0))"
        [ "$w1" = "$w0" ] || NOTES+=("$k: nginx logged 'worker_connections are not enough' $((w1 - w0)) times")
    fi
    raw "$k: attacker log:"
    cat "$f.log" >>"$RAW"
    raw "$k: held ${A_HOLD[$k]} s until the end of the wrk run; attacker cpu ${A_ATK_CPU[$k]}% of a core during wrk; VmRSS after the run $rss3 kB${A_COUNTERS[$k]:+; hoard counters ${A_COUNTERS[$k]}}"
    # Let the proxy release the sockets before the next run.
    wait_fds "$p" le $((FD0 + 16)) 30 || NOTES+=("$k: the proxy still held $(( $(nfd "$p") - FD0 )) more descriptors 30 s after the attacker stopped")
}

# -------------------------------------------------------------- measure ----
# Interleaved: odd runs baseline first, even runs attack first.
for r in $(seq "$RUNS"); do
    for p in $PROXIES; do
        if [ $((r % 2)) -eq 1 ]; then
            wait_quiet; wrk_run "$p-base#$r" "$p"; attack_run "$p" "$r"
        else
            attack_run "$p" "$r"; wait_quiet; wrk_run "$p-base#$r" "$p"
        fi
    done
done

median_of() { # cell: copy the run with the median req/s to R_*[cell]
    local t="$1" order mid a
    order="$(for r in $(seq "$RUNS"); do echo "${R_RPS[$t#$r]} $r"; done | sort -n)"
    mid="$(sed -n "$(( (RUNS + 1) / 2 ))p" <<<"$order" | cut -d' ' -f2)"
    for a in R_RPS R_P50 R_P99 R_MAX R_REQ R_CPU R_ERR R_OCPU R_PCPU R_WCPU; do
        declare -n arr="$a"
        arr["$t"]="${arr[$t#$mid]}"
        unset -n arr
    done
    R_MID[$t]="$mid"
    R_RANGE[$t]="$(head -n1 <<<"$order" | cut -d' ' -f1)–$(tail -n1 <<<"$order" | cut -d' ' -f1)"
}
for p in $PROXIES; do median_of "$p-base"; median_of "$p-attack"; done

# --------------------------------------------------------------- report ----
ms() { awk -v u="$1" 'BEGIN { printf "%.2f ms", u / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2fx", a / b }'; }
bytes() { case "$1" in n/a) echo n/a ;; *) awk -v b="$1" 'BEGIN { if (b >= 10240 || b <= -10240) printf "%.1f KiB", b / 1024; else printf "%d B", b }' ;; esac; }
median_list() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

nginx_ver="$(nginx -v 2>&1 | sed 's/^nginx version: //')"
hold_max="$(for k in "${!A_HOLD[@]}"; do echo "${A_HOLD[$k]}"; done | sort -n | tail -n1)"
{
    echo "# hoard connection-attack benchmark ($STAMP)"
    echo
    machine_line
    if has "$PROXIES" hoard; then
        echo "- hoard: git $git_rev (binary built $(hoard_built)), \`hoard run --config\`: threads 1, memory_size 256MiB, admin listener; header_read_timeout ${HOARD_HEADER_READ_TIMEOUT:-10s (default)}, max_connections ${HOARD_MAX_CONNECTIONS:-10000 (default)}"
    fi
    if has "$PROXIES" nginx; then
        wc_why=""
        [ $((N_IDLE + N_LORIS + CONNS)) -le 4096 ] || wc_why=" (lib.sh's 4096 is too few for $((N_IDLE + N_LORIS)) attack connections: nginx then closes idle ones to make room)"
        echo "- nginx: $nginx_ver, proxy_cache as in hit.sh, worker_processes 1, **worker_connections $NGINX_WORKER_CONNECTIONS**$wc_why, worker_rlimit_nofile $NOFILE, client_header_timeout ${NGINX_CLIENT_HEADER_TIMEOUT:-60s (default)}"
    fi
    echo "- ulimit -n $NOFILE for the proxies; the attacker raises its own RLIMIT_NOFILE to the hard limit"
    if [ "$ATTACK_CPU" = "$WRK_CPU" ]; then
        echo "- proxy pinned to CPU $PROXY_CPU; wrk and the attacker (bench/attack_hold.py) share CPU $WRK_CPU"
    else
        echo "- proxy pinned to CPU $PROXY_CPU, wrk to CPU $WRK_CPU, the attacker (bench/attack_hold.py) to CPU $ATTACK_CPU"
    fi
    echo "- load: wrk -t$WRK_THREADS -c$CONNS -d${DURATION}s --latency on a warm 1 KiB object, every request a cache hit"
    echo "- attack: $N_IDLE idle connections (connect, send nothing) + $N_LORIS slow-loris connections (\`GET /1k.bin HTTP/1.1\` and Host, then one header line every ${LORIS_INTERVAL} s, head never finished), opened before the wrk run and held through it; reconnect $([ "$RECONNECT" = 1 ] && echo "on: every connection the proxy closes is replaced at once" || echo "off")"
    echo "- runs: $RUNS baseline and $RUNS attack runs per proxy, interleaved; each cell is the run with the median req/s"
    echo "- RSS per connection: VmRSS of the proxy (nginx: its worker) read after each step of the attack (first $IDLE_FIRST idle connections, then the other $((N_IDLE - IDLE_FIRST)), then $N_LORIS slow-loris ones): growth over the second idle step / its connections, and over the slow-loris step / its connections (the first step absorbs memory the allocator kept from the previous run); from the first attack on each proxy. Kernel socket memory is not in RSS"
    echo "- held at end: attack connections (idle/slow-loris) open when the wrk run ended, up to ${hold_max} s after the idle ones were opened; closed: how many the proxy closed during the hold (each replaced when reconnect is on); first wave: of the original connections, how many were never closed"
    echo
    echo "| proxy | baseline req/s | baseline p99 | attack req/s | attack p99 | req/s attack/base | p99 attack/base | RSS / idle conn | RSS / slow-loris conn | held at end (idle/loris) | closed by proxy (idle/loris) | first wave left | wrk errors under attack |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for p in $PROXIES; do
        b="$p-base"; a="$p-attack"; k1="$p-attack#1"
        km="$p-attack#${R_MID[$a]}"
        echo "| $p | ${R_RPS[$b]} | $(ms "${R_P99[$b]}") | ${R_RPS[$a]} | $(ms "${R_P99[$a]}") | **$(ratio "${R_RPS[$a]}" "${R_RPS[$b]}")** | $(ratio "${R_P99[$a]}" "${R_P99[$b]}") | $(bytes "${A_RSS_IDLE[$k1]}") | $(bytes "${A_RSS_LORIS[$k1]}") | ${A_END[$km]} of $N_IDLE/$N_LORIS | ${A_CLOSED[$km]} | ${A_FIRST[$km]} | ${R_ERR[$a]} |"
    done
    echo
    for p in $PROXIES; do
        within="$(awk -v a="${R_RPS[$p-attack]}" -v b="${R_RPS[$p-base]}" 'BEGIN { print (a >= 0.9 * b) ? "within" : "outside" }')"
        echo "- $p: attack req/s $(awk -v a="${R_RPS[$p-attack]}" -v b="${R_RPS[$p-base]}" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }') against baseline ($within the 10% target), p99 $(awk -v a="${R_P99[$p-attack]}" -v b="${R_P99[$p-base]}" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')"
    done
    echo
    echo "Every run:"
    echo
    echo "| proxy | run | kind | req/s | p50 | p99 | max | cpu µs/req | proxy cpu | wrk cpu | other cpu | wrk errors | VmRSS before → steps → after (kB) | RSS/idle | RSS/loris | held s | held at end | closed | attacker cpu |"
    echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"
    for p in $PROXIES; do
        for r in $(seq "$RUNS"); do
            for kind in base attack; do
                k="$p-$kind#$r"
                if [ "$kind" = attack ]; then
                    extra="${A_RSS_CHAIN[$k]} | $(bytes "${A_RSS_IDLE[$k]}") | $(bytes "${A_RSS_LORIS[$k]}") | ${A_HOLD[$k]} | ${A_END[$k]} | ${A_CLOSED[$k]} | ${A_ATK_CPU[$k]}%"
                else
                    extra=" | | | | | |"
                fi
                echo "| $p | $r | $kind | ${R_RPS[$k]} | $(ms "${R_P50[$k]}") | $(ms "${R_P99[$k]}") | $(ms "${R_MAX[$k]}") | ${R_CPU[$k]} | ${R_PCPU[$k]}% | ${R_WCPU[$k]}% | ${R_OCPU[$k]}% | ${R_ERR[$k]} | $extra |"
            done
        done
    done
    echo
    for p in $PROXIES; do
        echo "- $p req/s range: baseline ${R_RANGE[$p-base]}, attack ${R_RANGE[$p-attack]}; median RSS per idle connection over all rounds $(bytes "$(for r in $(seq "$RUNS"); do echo "${A_RSS_IDLE[$p-attack#$r]}"; done | median_list)")"
    done
    if has "$PROXIES" hoard; then
        echo "- hoard counters (attack round 1): ${A_COUNTERS[hoard-attack#1]}"
    fi
    if [ "${#NOTES[@]}" -gt 0 ]; then
        echo
        echo "Notes:"
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
    echo
    echo "Raw output (wrk, attacker ticks, RSS and socket counts): ${RAW#"$ROOT"/}"
} >"$REPORT"

report_done
