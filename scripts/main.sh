#!/usr/bin/env bash
# wgconv's main job: the AlexNet conv1 tile-size benchmark, then the micro-tuner, on the best
# adapter found (discrete GPU first; WGCONV_ADAPTER=<name substring> and WGPU_BACKEND choose).
# On a CPU adapter (lavapipe) both pick a small batch by themselves and say so.
# Installs lavapipe first when the machine has no Vulkan driver (see scripts/setup.sh).
#
# Usage: bash scripts/main.sh [extra `wgconv bench` arguments, e.g. --batch 64]
# Writes bench.json, bench.svg, bench-f16x3.json (cooperative-matrix adapters), tune.json,
# tune-f16.json (adapters with an f16 path) and tune-f16x3.json (cooperative-matrix adapters)
# under ${WGCONV_OUT:-target/wgconv}.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '== %s\n' "$*"; }
source scripts/setup.sh

OUT=${WGCONV_OUT:-target/wgconv}
mkdir -p "$OUT"
say "cargo build --release -p wgconv-cli"
cargo build --release --quiet -p wgconv-cli
BIN=target/release/wgconv
"$BIN" info
say "wgconv bench (AlexNet conv1): JSON $OUT/bench.json, chart $OUT/bench.svg"
"$BIN" bench --preset alexnet-conv1 --json "$OUT/bench.json" --svg "$OUT/bench.svg" "$@"
# Runs `wgconv "$@"`; where the adapter cannot run the asked precision (wgconv refuses it:
# "f16x3 precision cannot run here ..."), says so and goes on.
where_supported() {
    local out
    if out=$("$BIN" "$@" 2>&1); then
        echo "$out"
    elif grep -q "precision cannot run here" <<< "$out"; then
        say "skipped: $(grep -o '[^ ]* precision cannot run here.*' <<< "$out" | head -1)"
    else
        echo "$out"
        return 1
    fi
}
# f32-accurate results from the matrix units (`--precision f16x3`), where the adapter has
# cooperative matrices; elsewhere wgconv refuses that precision and this step says so.
say "wgconv bench --precision f16x3 (AlexNet conv1): JSON $OUT/bench-f16x3.json"
where_supported bench --preset alexnet-conv1 --precision f16x3 --json "$OUT/bench-f16x3.json" "$@"
say "wgconv tune (AlexNet conv1, the config a default Conv2d starts from as the original)"
"$BIN" tune --preset alexnet-conv1 --json "$OUT/tune.json"
# The other precisions' kernels tune on their own (each decision is cached per precision):
# f16 on cooperative matrices or the f16 SIMT kernel, f16x3 on cooperative matrices only.
for p in f16 f16x3; do
    say "wgconv tune --precision $p (AlexNet conv1, the kernel's default config as the original)"
    where_supported tune --preset alexnet-conv1 --precision "$p" --json "$OUT/tune-$p.json"
done
