#!/usr/bin/env bash
# Builds edge_rs.wasm, a Proxy-Wasm filter written with the public Rust SDK
# (the `proxy-wasm` crate from crates.io), for wasm32-unknown-unknown.
#
#   ./build.sh OUT_DIR        # writes OUT_DIR/edge_rs.wasm
#
# With rustup: adds the wasm32-unknown-unknown target when missing and builds
# with proxy-wasm 0.2.5 (Cargo.lock). Without rustup, or when the target
# cannot be had: Debian's rustc with libstd-rust-dev-wasm32 and lld
# (installed with apt-get when missing, as root), proxy-wasm 0.2.2
# (debian/Cargo.lock). BUILD_DIR keeps cargo's target directory between runs.
set -euo pipefail

out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${BUILD_DIR:-$(mktemp -d)}
mkdir -p "$work"
target=wasm32-unknown-unknown

with_rustup() {
  command -v rustup >/dev/null || return 1
  rustup target list --installed | grep -qx "$target" || rustup target add "$target" || return 1
  cargo build --quiet --release --locked --target "$target" \
    --manifest-path "$here/Cargo.toml" --target-dir "$work/rustup"
  cp "$work/rustup/$target/release/edge_rs.wasm" "$out/"
}

with_debian() {
  if [[ ! -e /usr/lib/rustlib/$target ]] || ! command -v /usr/bin/rust-lld >/dev/null; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      rustc cargo libstd-rust-dev-wasm32 lld >/dev/null
  fi
  # Debian's cargo and rustc alone (rustup's must not mix in); the sparse
  # index reaches crates.io over HTTPS.
  env PATH=/usr/bin:/bin CARGO_HOME="$work/cargo-home" /usr/bin/cargo -Z sparse-registry \
    build --quiet --release --locked --target "$target" \
    --manifest-path "$here/debian/Cargo.toml" --target-dir "$work/debian"
  cp "$work/debian/$target/release/edge_rs.wasm" "$out/"
}

if with_rustup; then
  how="rustup"
else
  echo "build.sh: no rustup wasm32 target; building with Debian's rustc" >&2
  with_debian
  how="debian"
fi
printf 'edge_rs.wasm %d bytes (%s)\n' "$(stat -c %s "$out/edge_rs.wasm")" "$how"
