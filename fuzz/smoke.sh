#!/usr/bin/env bash
# Runs every fuzz target for a short while (default 10 s each) and fails on
# the first crash. Usage: fuzz/smoke.sh [SECONDS] [TARGET...]
#
# cargo-fuzz builds with nightly-only flags (-Zsanitizer=address);
# RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-10}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(cache_control structured key range response_facts fields target units)
fi
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
    features=()
    [ "$t" = units ] && features=(--features config)
    mkdir -p "$work/$t"
    seeds=()
    [ -d "seeds/$t" ] && seeds=("seeds/$t")
    echo "fuzz: $t for ${secs}s"
    status=0
    cargo fuzz run "${features[@]}" "$t" "$work/$t" "${seeds[@]}" -- \
        -max_total_time="$secs" >"$work/$t.log" 2>&1 || status=$?
    grep -E '^Done' "$work/$t.log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$work/$t.log" >&2
        echo "fuzz: $t failed (inputs in fuzz/artifacts/$t/)" >&2
        exit 1
    fi
done
echo "fuzz: ${#targets[@]} targets ran ${secs}s each without a crash"
