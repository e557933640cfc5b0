#!/usr/bin/env bash
# wgconv's test suite: GPU-vs-CPU-reference tests on whatever Vulkan/Metal/DX12/GL adapter
# is found, plus naga portability checks that need no device.
#
# On a machine without any Vulkan driver (a CI runner, a server without GPU) this installs
# Mesa lavapipe (Vulkan on the CPU) with apt-get first, as root or through sudo, so the
# whole suite runs anywhere Debian/Ubuntu runs. A machine with a driver is left untouched.
#
# The workspace: the library (package wgconv, src/) and the command line (package
# wgconv-cli, cli/, binary `wgconv`). Besides the tests, the library must build without its
# default features and for wasm32-unknown-unknown (the browser's WebGPU), where the browser
# tests run it in headless Chromium (scripts/web.sh test).
#
# Usage: bash scripts/test.sh [extra `cargo test` arguments, e.g. -- --nocapture]
# Env:   WGCONV_TEST_SEED=<u64>   replay the random data of a failed test
#        WGCONV_ADAPTER=<substr>  pick an adapter by name (e.g. llvmpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# A one-shot run gains nothing from incremental caches, which cost gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

say() { printf '== %s\n' "$*"; }

# --- Vulkan driver and Rust ------------------------------------------------------------
source scripts/setup.sh

# --- Tests ---------------------------------------------------------------------------
# --workspace --all-targets --all-features: both packages' unit and integration tests
# (tests/*.rs, cli/tests/*.rs), and builds the CLI, examples and benches (each benchmark run
# once in test mode), with the tuner and the naga portability checks.
# The browser package (web/) is left out here: it is built for wasm32 and tested in a
# browser below.
say "cargo test --workspace --exclude wgconv-web --all-targets --all-features"
cargo test --workspace --exclude wgconv-web --all-targets --all-features --no-fail-fast "$@"
# The transposing layout passes go by tiles on GPUs only: the layout and storage tests again,
# through them.
say "WGCONV_TILED_LAYOUT_PASSES=1 cargo test -p wgconv --all-features --test layout --test storage"
WGCONV_TILED_LAYOUT_PASSES=1 cargo test -p wgconv --all-features --test layout --test storage
# The doc examples (the no_run ones compiled, the others run).
say "cargo test --workspace --exclude wgconv-web --doc --all-features"
cargo test --workspace --exclude wgconv-web --doc --all-features
# The README's example and the bring-your-own-device one, run for real (the others are
# built by --all-targets above). --all-features reuses the test build: without it the
# naga-check feature's absence changes naga's features, and wgpu is built a second time.
for ex in basic byod padding; do
    say "cargo run -p wgconv --all-features --example $ex"
    cargo run --quiet -p wgconv --all-features --example "$ex"
done

# --- Lints ----------------------------------------------------------------------------
# Every target and feature, warnings as errors (clippy's incompatible_msrv lint also
# refuses std APIs newer than the rust-version in Cargo.toml).
# (the browser package is linted for wasm32 by scripts/web.sh's build below).
say "cargo clippy --workspace --exclude wgconv-web --all-targets --all-features -- -D warnings"
cargo clippy --workspace --exclude wgconv-web --all-targets --all-features -- -D warnings
# The stated MSRV: no dependency asks for more, and the library builds with that toolchain
# where rustup has it.
say "bash scripts/msrv.sh"
bash scripts/msrv.sh

# --- Builds ---------------------------------------------------------------------------
# The library without the tuner (its default feature) ...
say "cargo build -p wgconv --no-default-features"
cargo build --quiet -p wgconv --no-default-features
# ... and for the browser. The target comes from rustup; without rustup, or where rustup
# cannot fetch it (no network), this build is skipped with a message.
WASM=wasm32-unknown-unknown
wasm_target() {
    if ! command -v rustup >/dev/null; then
        say "skipped: cargo build --target $WASM (no rustup to provide the target)"
        return 1
    fi
    rustup target list --installed 2>/dev/null | grep -x "$WASM" >/dev/null && return 0
    say "rustup target add $WASM"
    rustup target add "$WASM" && return 0
    say "skipped: cargo build --target $WASM (rustup could not add the target)"
    return 1
}
if wasm_target; then
    # The browser tests (issue 21): the wasm package (which builds the library for wasm32
    # without its default features) in headless Chromium on SwiftShader; web.sh installs
    # Chromium, binaryen and the matching wasm-bindgen CLI where they are missing.
    say "bash scripts/web.sh test"
    bash scripts/web.sh test
fi

say "all tests passed in $(( $(date +%s) - start )) s"
