#!/usr/bin/env bash
# A long run of a three-node hoard cluster on a Redis/Valkey bus, as an
# operator would try a staging cluster: Zipf-popular objects of 1-256 KiB
# (one request in ten a byte range), five popular objects changed and purged
# every 10 s, and (FAULTS=1) a binary upgrade of one node every 75 s, one
# node killed with SIGKILL and restarted, Redis stopped for 10 s and started
# again empty, one node frozen (SIGSTOP) for 5 s. Reports client errors on
# live nodes, cut, corrupt and stale bodies, origin fetches against the
# minimum, and each node's resident memory over time, with its growth rate
# over the last two minutes. See bench/README.md.
#
# Environment knobs (all optional):
#   SECONDS_TOTAL=360   length of the run
#   OBJECTS=2000        objects (Zipf popularity)
#   THREADS=16          client threads
#   FAULTS=1            0: a steady run (no upgrades, kills, freezes)
#   CACHE_SIZE=32MiB    each node's memory tier
#   SAMPLE=5            seconds between memory samples
#   HOARD_BIN, SKIP_BUILD=1, KEEP=1, BASE_PORT=19400
set -euo pipefail

BENCH_NAME=soak
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SECONDS_TOTAL="${SECONDS_TOTAL:-360}"
OBJECTS="${OBJECTS:-2000}"
THREADS="${THREADS:-16}"
FAULTS="${FAULTS:-1}"
CACHE_SIZE="${CACHE_SIZE:-32MiB}"
SAMPLE="${SAMPLE:-5}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-19400}"
require_whole SECONDS_TOTAL
require_whole OBJECTS
require_whole THREADS
require_positive SECONDS_TOTAL OBJECTS THREADS SAMPLE

ensure_tools curl:curl python3:python3 redis-server:redis-server
raise_nofile
NCPU="$(nproc)"
build_hoard
start_run soak

free_port ORIGIN_PORT
spawn "$RUN/origin.log" python3 "$BENCH_DIR/soak_origin.py" --port "$ORIGIN_PORT"
wait_port "$ORIGIN_PORT" origin "$STARTED_PID" "$RUN/origin.log"

free_port REDIS_PORT
start_redis() {
    spawn "$RUN/redis.log" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$RUN" --save "" --appendonly no
    REDIS_PID="$STARTED_PID"
    wait_port "$REDIS_PORT" redis "$REDIS_PID" "$RUN/redis.log"
}
start_redis

PORTS=(); ADMINS=(); NODES=""; ADMIN_LIST=""
for i in 1 2 3; do
    free_port p; free_port a
    PORTS+=("$p"); ADMINS+=("$a")
    NODES+="${NODES:+,}127.0.0.1:$p"; ADMIN_LIST+="${ADMIN_LIST:+,}127.0.0.1:$a"
done
start_node() { # I: start node I (1-based); its pid is in $RUN/nI.pid
    local i="$1"
    rm -f "$RUN/n$i.pid"
    spawn "$RUN/n$i.log" "$HOARD_BIN" --upstream "http://127.0.0.1:$ORIGIN_PORT" \
        --listen "127.0.0.1:${PORTS[i-1]}" --admin "127.0.0.1:${ADMINS[i-1]}" --threads 1 \
        --cache-size "$CACHE_SIZE" --cluster-node "n$i" --cluster-bus "redis://127.0.0.1:$REDIS_PORT/0" \
        --cluster-advertise "127.0.0.1:${PORTS[i-1]}" --cluster-rampup 0s --pid-file "$RUN/n$i.pid"
    wait_port "${PORTS[i-1]}" "n$i" "$STARTED_PID" "$RUN/n$i.log"
}
pid_of() { cat "$RUN/n$1.pid" 2>/dev/null || true; }
for i in 1 2 3; do start_node "$i"; done
for i in 1 2 3; do
    for _ in $(seq 200); do
        seen="$(curl -sS "http://127.0.0.1:${ADMINS[i-1]}/status" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["cluster"]["members"]))')"
        [ "$seen" -ge 3 ] && break
        sleep 0.05
    done
    [ "$seen" -ge 3 ] || die "n$i routes to $seen members, not 3"
done
stop_all_nodes() { local i p; for i in 1 2 3; do p="$(pid_of "$i")"; [ -z "$p" ] || kill -TERM "$p" 2>/dev/null || true; done; }
trap 'rc=$?; stop_all_nodes; (exit $rc); cleanup' EXIT

# Memory: every SAMPLE seconds, "second node pid rss_kib" for each node.
DOWN="$RUN/down"
: >"$DOWN"
T0="$(date +%s)"
(
    while sleep "$SAMPLE"; do
        now=$(( $(date +%s) - T0 ))
        for i in 1 2 3; do
            p="$(pid_of "$i")"
            [ -n "$p" ] || continue
            rss="$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)"
            [ -z "$rss" ] || echo "$now n$i $p $rss"
        done
    done
) >"$RUN/mem.tsv" &
SAMPLER=$!
PIDS+=("$SAMPLER")

log "${SECONDS_TOTAL}s of load on $NODES ($OBJECTS objects, $THREADS threads, faults: $FAULTS)"
python3 "$BENCH_DIR/soak_client.py" "$NODES" "$ADMIN_LIST" "127.0.0.1:$ORIGIN_PORT" "$SECONDS_TOTAL" \
    "$OBJECTS" "$THREADS" "$DOWN" >"$RUN/client.out" 2>"$RUN/client.err" &
CLIENT=$!

# The client reads the file every 50 ms: a node is marked before it stops.
mark_down() { echo "127.0.0.1:${PORTS[$1-1]}" >>"$DOWN"; sleep 0.2; }
mark_up() { grep -v "^127.0.0.1:${PORTS[$1-1]}\$" "$DOWN" >"$DOWN.new" || true; mv "$DOWN.new" "$DOWN"; }
at() { # SECOND: sleep until SECOND of the run
    local left=$(( $1 - ($(date +%s) - T0) ))
    [ "$left" -le 0 ] || sleep "$left"
}
EVENTS=()
if [ "$FAULTS" = 1 ]; then
    kill_at=$(( SECONDS_TOTAL * 40 / 100 ))
    redis_at=$(( SECONDS_TOTAL * 55 / 100 ))
    freeze_at=$(( SECONDS_TOTAL * 70 / 100 ))
    plan=()
    for ((t = 75, k = 0; t < SECONDS_TOTAL - 10; t += 75, k++)); do plan+=("$t upgrade $(( k % 3 + 1 ))"); done
    plan+=("$kill_at kill 3" "$redis_at redis 0" "$freeze_at freeze 2")
    while read -r t what node; do
        at "$t"
        case "$what" in
            upgrade)
                old="$(pid_of "$node")"
                "$HOARD_BIN" upgrade --pid-file "$RUN/n$node.pid" >>"$RUN/upgrade.log" 2>&1 || die "upgrade of n$node failed"
                for _ in $(seq 100); do [ "$(pid_of "$node")" != "$old" ] && [ -n "$(pid_of "$node")" ] && break; sleep 0.1; done
                EVENTS+=("$t s: n$node upgraded (pid $old -> $(pid_of "$node"))") ;;
            kill)
                mark_down "$node"; old="$(pid_of "$node")"
                kill -KILL "$old"
                sleep 5
                start_node "$node"; mark_up "$node"
                EVENTS+=("$t s: n$node killed (SIGKILL), started again 5 s later (pid $(pid_of "$node"))") ;;
            redis)
                stop_pid "$REDIS_PID"; sleep 10; start_redis
                EVENTS+=("$t s: Redis stopped for 10 s, started again empty") ;;
            freeze)
                mark_down "$node"; p="$(pid_of "$node")"
                kill -STOP "$p"; sleep 5; kill -CONT "$p"; mark_up "$node"
                EVENTS+=("$t s: n$node frozen (SIGSTOP) for 5 s") ;;
        esac
        log "${EVENTS[-1]}"
    done < <(printf '%s\n' "${plan[@]}" | sort -n)
fi
wait "$CLIENT" || die "the client failed (see $RUN/client.err)"
out="$(cat "$RUN/client.out")"
log "$out"
origin="$(curl -sS "http://127.0.0.1:$ORIGIN_PORT/__stats")"
status_mem() { curl -sS --max-time 5 "http://127.0.0.1:${ADMINS[$1-1]}/status" | python3 -c '
import json,sys
s = json.load(sys.stdin)
m = s.get("memory")
print(json.dumps(m, separators=(",", ":")) if m else "(not reported)")' 2>/dev/null || echo "(no answer)"; }
kill "$SAMPLER" 2>/dev/null || true

field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
report_start soak
{
    echo "# cluster soak ($STAMP)"
    echo
    machine_line
    echo "- hoard $git_rev, built $(hoard_built); three nodes (--threads 1, --cache-size $CACHE_SIZE, near tier at its default), Redis bus, members by heartbeat"
    echo "- ${SECONDS_TOTAL}s, $THREADS client threads, $OBJECTS objects of 1-256 KiB (Zipf), one request in ten a byte range, five objects changed and purged every 10 s"
    echo
    echo "## Correctness"
    echo
    echo "| requests | ok | errors on live nodes | cut | corrupt | stale | on a stopped node | purges acked |"
    echo "|---|---|---|---|---|---|---|---|"
    echo "| $(field requests "$out") | $(field ok "$out") | $(field errors "$out") | $(field cut "$out") | $(field corrupt "$out") | $(field stale "$out") | $(field on_down "$out") | $(field purges_acked "$out") of $(field purges "$out") |"
    echo
    echo "- origin: $(field requests "$origin") requests for $(field versions "$origin") object versions fetched ($(field objects "$origin") objects): $(awk -v r="$(field requests "$origin")" -v v="$(field versions "$origin")" 'BEGIN { printf "%.2f", r / v }') fetches per version"
    if [ ${#EVENTS[@]} -gt 0 ]; then
        echo
        echo "## Faults"
        echo
        for e in "${EVENTS[@]}"; do echo "- $e"; done
    fi
    echo
    echo "## Resident memory (MiB)"
    echo
    python3 - "$RUN/mem.tsv" "$SAMPLE" <<'EOF'
import collections, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)  # (node, pid) -> [(t, mib)]
for t, node, pid, kib in rows:
    by[(node, pid)].append((int(t), int(kib) / 1024))
nodes = sorted({n for n, _ in by})
last = max(int(r[0]) for r in rows)
step = 30
print("| second | " + " | ".join(nodes) + " |")
print("|---" * (len(nodes) + 1) + "|")
for t in range(step, last + 1, step):
    cells = []
    for n in nodes:
        near = [(abs(s - t), mib, pid) for (m, pid), v in by.items() if m == n for s, mib in v if abs(s - t) < step / 2]
        cells.append(f"{min(near)[1]:.0f}" if near else "-")
    print(f"| {t} | " + " | ".join(cells) + " |")
print()
print("Growth of each process over its last 120 s (least squares over the samples; processes that lived less than 120 s are left out):")
print()
for (n, pid), v in sorted(by.items()):
    end = v[-1][0]
    w = [(s, m) for s, m in v if s >= end - 120]
    if v[0][0] > end - 120 or len(w) < 3:
        continue
    mt = sum(s for s, _ in w) / len(w)
    mm = sum(m for _, m in w) / len(w)
    slope = sum((s - mt) * (m - mm) for s, m in w) / sum((s - mt) ** 2 for s, _ in w)
    print(f"- {n} (pid {pid}, seconds {v[0][0]}-{end}): {v[0][1]:.0f} -> {v[-1][1]:.0f} MiB, {slope:+.3f} MiB/s over its last 120 s")
EOF
    echo
    echo "## Memory as each node reports it at the end (/status)"
    echo
    for i in 1 2 3; do echo "- n$i: $(status_mem "$i")"; done
} >"$REPORT"
stop_all_nodes
[ "$(field errors "$out")" = 0 ] && [ "$(field corrupt "$out")" = 0 ] && [ "$(field stale "$out")" = 0 ] \
    || log "warning: errors, corrupt or stale answers (see $RUN/client.err)"
report_done
