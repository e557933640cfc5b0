#!/usr/bin/env bash
# wgconv's test suite: GPU-vs-CPU-reference tests on whatever Vulkan/Metal/DX12/GL adapter
# is found, plus naga portability checks that need no device.
#
# On a machine without any Vulkan driver (a CI runner, a server without GPU) this installs
# Mesa lavapipe (Vulkan on the CPU) with apt-get first, as root or through sudo, so the
# whole suite runs anywhere Debian/Ubuntu runs. A machine with a driver is left untouched.
#
# Usage: bash scripts/test.sh [extra `cargo test` arguments, e.g. -- --nocapture]
# Env:   WGCONV_TEST_SEED=<u64>   replay the random data of a failed test
#        WGCONV_ADAPTER=<substr>  pick an adapter by name (e.g. llvmpipe)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

say() { printf '== %s\n' "$*"; }

# --- Vulkan driver and Rust ------------------------------------------------------------
source scripts/setup.sh

# --- Tests ---------------------------------------------------------------------------
# --all-targets: unit tests, tests/*.rs, and builds the CLI, examples and benches.
say "cargo test --all-targets"
cargo test --all-targets --no-fail-fast "$@"
# The library's doc example (no_run: compiled, not run).
say "cargo test --doc"
cargo test --doc
# The README's example, run for real.
say "cargo run --example basic"
cargo run --quiet --example basic

say "all tests passed in $(( $(date +%s) - start )) s"
