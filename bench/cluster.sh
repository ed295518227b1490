#!/usr/bin/env bash
# A hoard cluster on loopback: origin requests per object, purge fan-out
# latency, and a member killed under load. See bench/README.md.
#
# Environment knobs (all optional):
#   OBJECTS=200 REQUESTS=2000   objects and requests of the spread test
#   PURGES=300                  purges timed per cluster size
#   LOAD_SECONDS=6              the kill test's length (the kill at a third)
#   HOARD_BIN, SKIP_BUILD=1, KEEP=1, BASE_PORT=18800
set -euo pipefail

BENCH_NAME=cluster
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OBJECTS="${OBJECTS:-200}"
REQUESTS="${REQUESTS:-2000}"
PURGES="${PURGES:-300}"
LOAD_SECONDS="${LOAD_SECONDS:-6}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18800}"
require_whole OBJECTS
require_whole REQUESTS
require_whole PURGES
require_positive OBJECTS REQUESTS PURGES LOAD_SECONDS

ensure_tools curl:curl python3:python3
NCPU="$(nproc)"
raise_nofile
build_hoard
start_run cluster
TAG="$(date +%s)"

free_port ORIGIN_PORT
spawn "$RUN/origin.log" python3 "$BENCH_DIR/fill_origin.py" --port "$ORIGIN_PORT" --body-size 4096
wait_port "$ORIGIN_PORT" origin "$STARTED_PID" "$RUN/origin.log"
count() { curl -sS "http://127.0.0.1:$ORIGIN_PORT/__count?prefix=$1"; }

# start_nodes NAME N [cluster]: N hoards; sets NODES (host:port list),
# ADMIN1 (the first one's admin) and NODE_PIDS.
start_nodes() {
    local name="$1" n="$2" clustered="${3:-}" i peers="" ports=() admins=() p a
    for i in $(seq "$n"); do free_port p; ports+=("$p"); free_port a; admins+=("$a"); done
    for i in $(seq "$n"); do peers+="${peers:+,}n$i=127.0.0.1:${ports[i-1]}"; done
    NODES=""; NODE_PIDS=()
    for i in $(seq "$n"); do
        local args=(--upstream "http://127.0.0.1:$ORIGIN_PORT" --listen "127.0.0.1:${ports[i-1]}"
            --admin "127.0.0.1:${admins[i-1]}" --threads 1)
        [ -z "$clustered" ] || args+=(--cluster-node "n$i" --cluster-peers "$peers")
        spawn "$RUN/$name-n$i.log" "$HOARD_BIN" "${args[@]}"
        NODE_PIDS+=("$STARTED_PID")
        wait_port "${ports[i-1]}" "$name-n$i" "$STARTED_PID" "$RUN/$name-n$i.log"
        NODES+="${NODES:+,}127.0.0.1:${ports[i-1]}"
    done
    ADMIN1="127.0.0.1:${admins[0]}"
}
stop_nodes() { local p; for p in "${NODE_PIDS[@]}"; do stop_pid "$p"; done; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

declare -A R
# ------------------------------------------- 1. origin requests per object ----
for kind in cluster independent; do
    start_nodes "$kind" 3 "$([ "$kind" = cluster ] && echo yes)"
    prefix="/cold/0/$kind-$TAG-"
    out="$(python3 "$BENCH_DIR/cluster_client.py" spread "$NODES" "$OBJECTS" "$REQUESTS" "$prefix")"
    log "$kind: $out"
    [ "$(field bad "$out")" = 0 ] || die "$kind: failed requests: $out"
    R[$kind]="$(awk -v o="$(count "$prefix")" -v n="$OBJECTS" 'BEGIN { printf "%.2f", o / n }')"
    if [ "$kind" = cluster ]; then
        # ----------------------------------------- 2. purge fan-out, 3 nodes ----
        out="$(python3 "$BENCH_DIR/cluster_client.py" purge "$ADMIN1" "$PURGES")"
        log "purge, 3 nodes: $out"
        R[p3]="$out"
        # ------------------------------------ 3. a member killed under load ----
        prefix="/cold/0/kill-$TAG-"
        live="$(cut -d, -f1,3 <<<"$NODES")"
        python3 "$BENCH_DIR/cluster_client.py" load "$live" "$LOAD_SECONDS" "$prefix" >"$RUN/load.out" &
        loader=$!
        sleep "$(awk -v s="$LOAD_SECONDS" 'BEGIN { print s / 3 }')"
        kill -KILL "${NODE_PIDS[1]}"
        wait "$loader"
        out="$(cat "$RUN/load.out")"
        log "kill: $out"
        R[kill]="$out"
        R[kill_origin]="$(count "$prefix")"
    fi
    stop_nodes
done
start_nodes five 5 yes
out="$(python3 "$BENCH_DIR/cluster_client.py" purge "$ADMIN1" "$PURGES")"
log "purge, 5 nodes: $out"
R[p5]="$out"
stop_nodes

report_start cluster
{
    echo "# hoard cluster on loopback ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev, every node --threads 1 --admin; origin fill_origin.py (4 KiB bodies, max-age=3600)"
    echo
    echo "| measure | value |"
    echo "|---|---|"
    echo "| origin requests per object, 3 nodes, $REQUESTS requests over $OBJECTS objects, random node each | **${R[cluster]}** (target 1.00) |"
    echo "| the same through 3 independent hoards | ${R[independent]} |"
    echo "| purge to all-acked, 3 nodes (p50 / p99 / max ms, all acked) | $(field p50_ms "${R[p3]}") / $(field p99_ms "${R[p3]}") / $(field max_ms "${R[p3]}"), $(field all_acked "${R[p3]}") of $PURGES |"
    echo "| purge to all-acked, 5 nodes | $(field p50_ms "${R[p5]}") / $(field p99_ms "${R[p5]}") / $(field max_ms "${R[p5]}"), $(field all_acked "${R[p5]}") of $PURGES |"
    echo "| member killed (SIGKILL) a third into ${LOAD_SECONDS} s of misses on the two others: requests ok / failed | $(field ok "${R[kill]}") / **$(field bad "${R[kill]}")** (target 0) |"
    echo "| the same: origin requests for those unique URLs (ok requests) | ${R[kill_origin]} ($(field ok "${R[kill]}")) |"
} >"$REPORT"
report_done
