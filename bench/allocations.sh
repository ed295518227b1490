#!/usr/bin/env bash
# Heap allocations per 1 KiB memory hit: hoard built with the `count-allocs`
# feature (mimalloc underneath, every allocation counted, the total printed
# once a second), one worker thread, wrk with keep-alive. The count between
# two reports around the load, divided by the requests wrk completed.
# Budget: ALLOC_BUDGET (default 16) per hit; exits 1 above it.
set -euo pipefail
BENCH_NAME=allocs
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
DURATION=${DURATION:-5}
CONNS=${CONNS:-16}
ALLOC_BUDGET=${ALLOC_BUDGET:-16}

ensure_tools wrk:wrk curl:curl

start_run allocs
OUT=$RUN
NEXT_PORT=${BASE_PORT:-18380}
free_port ORIGIN; free_port HOARD

# Only the binary crate changes with the feature: build it, set it aside,
# and build the plain one back.
cargo build --release -q -p hoard --features count-allocs
BIN="$OUT/hoard-count-allocs"
cp "$ROOT/target/release/hoard" "$BIN"
cargo build --release -q -p hoard
head -c 1024 /dev/urandom > "$OUT/1k.bin"
spawn "$OUT/origin.log" python3 "$BENCH_DIR/file_origin.py" --port "$ORIGIN" --dir "$OUT"
ORIGIN_PID=$STARTED_PID
wait_port "$ORIGIN" origin "$ORIGIN_PID" "$OUT/origin.log"

spawn "$OUT/hoard.log" "$BIN" --upstream "http://127.0.0.1:$ORIGIN" --listen "127.0.0.1:$HOARD" --threads 1
HOARD_PID=$STARTED_PID
wait_port "$HOARD" hoard "$HOARD_PID" "$OUT/hoard.log"
curl -sf -o /dev/null "http://127.0.0.1:$HOARD/1k.bin"
wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$HOARD/1k.bin" >/dev/null
sleep 2
before=$(grep '^allocations' "$OUT/hoard.log" | tail -n1 | awk '{print $2}')
reqs=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$HOARD/1k.bin" | awk '/requests in/ {print $1}')
sleep 2
after=$(grep '^allocations' "$OUT/hoard.log" | tail -n1 | awk '{print $2}')
stop_pid "$HOARD_PID"
stop_pid "$ORIGIN_PID"
per=$(python3 -c "print(f'{($after - $before) / $reqs:.2f}')")
{
    echo "| hoard, 1 KiB memory hit | requests | allocations | per hit | budget |"
    echo "|---|---:|---:|---:|---:|"
    echo "| $(git rev-parse --short HEAD) | $reqs | $((after - before)) | $per | $ALLOC_BUDGET |"
} | tee "$OUT_DIR/allocations-$(date +%Y%m%d-%H%M%S).md"
python3 -c "import sys; sys.exit(0 if $per <= $ALLOC_BUDGET else 1)" || { echo "over the budget of $ALLOC_BUDGET allocations per hit" >&2; exit 1; }
