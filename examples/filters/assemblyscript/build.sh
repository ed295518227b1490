#!/usr/bin/env bash
# Builds the Proxy-Wasm test filters (add_header, deny, echo_props) with the
# AssemblyScript SDK @solo-io/proxy-runtime 0.1.8 and assemblyscript 0.14.9,
# both pinned exactly through package-lock.json and installed with `npm ci`.
#
#   ./build.sh OUT_DIR        # writes OUT_DIR/{add_header,deny,echo_props}.wasm
#
# Needs only node (>= 16; tested with 20) and npm, with the npm registry
# reachable. Works from a scratch copy of this directory so the source tree is
# never touched; set BUILD_DIR to keep (and reuse) that copy and its
# node_modules. hoard's e2e cases (u_filters) run it and then the filters.
set -euo pipefail

out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)

t0=$(date +%s.%N)
if [[ -n ${BUILD_DIR:-} ]]; then
  work=$BUILD_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
cp "$here/package.json" "$here/package-lock.json" "$here/compile.js" "$work/"
rm -rf "$work/filters"
cp -r "$here/filters" "$work/filters"
cd "$work"

# Exact versions from package-lock.json; no install scripts are needed.
if [[ ! -d node_modules/@solo-io/proxy-runtime ]]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
t1=$(date +%s.%N)

node compile.js "$out" add_header deny echo_props
t2=$(date +%s.%N)

for f in add_header deny echo_props; do
  printf '%-16s %6d bytes  sha256 %s\n' "$f.wasm" "$(stat -c %s "$out/$f.wasm")" \
    "$(sha256sum "$out/$f.wasm" | cut -d' ' -f1)"
done
awk -v a="$t0" -v b="$t1" -v c="$t2" \
  'BEGIN { printf "timing: npm ci %.1fs, compile %.1fs, total %.1fs\n", b - a, c - b, c - a }'
