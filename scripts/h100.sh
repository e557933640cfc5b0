#!/usr/bin/env bash
# The H100 run: wgconv's sweeps and the anchors (cuDNN, the seed's Triton kernel) in ONE run,
# so every number quoted in BENCHMARKS.md sits beside anchors measured on the same GPU the
# same minute. Meant for the device machine (see BENCHMARKS.md, "How to reproduce"):
#   carry .gl (Vulkan loader debs), .anchors (copy of ../shared/anchors) and target/release/wgconv
#   (built here with `cargo build --release -p wgconv-cli`).
# Usage: scripts/h100.sh [quick|full]   (quick: AlexNet sweep only, no anchors)
set -uo pipefail
MODE=${1:-full}
source "$(dirname "$0")/h100-env.sh"
# Everything printed goes to one log (the device returns at most 8 files).
exec > >(tee "$OUT/h100.log") 2>&1
date -u +%Y-%m-%dT%H:%M:%SZ
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
# SM clock and power every 100 ms for the whole run, summarised at exit over the busy samples
# (power above 150 W): the FMA peak the notes quote assumes the 1980 MHz boost clock.
# The samples stay off $OUT (only the summary goes to the log): the device returns at most 8 files.
CLOCKS=$(mktemp)
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$CLOCKS" &
SAMPLER=$!
clock_summary() {
    kill "$SAMPLER" 2>/dev/null
    awk -F', ' '$2 > 150 { print $1 }' "$CLOCKS" | sort -n |
        awk '{ v[NR] = $1 } END { if (NR) printf "SM clock while busy (power > 150 W, %d samples): min %d, median %d, max %d MHz\n", NR, v[1], v[int((NR + 1) / 2)], v[NR] }'
}
trap clock_summary EXIT
"$BIN" info || true
# AlexNet conv1 is the main job's shape (bench's own default is a generic 3x3 layer); the
# runs that name every shape flag override the preset's values.
run() { echo "== wgconv bench $*"; "$BIN" bench --preset alexnet-conv1 "$@"; }
run --json "$OUT/alexnet.json" --svg "$OUT/alexnet.svg" --direct ${BENCH_ARGS:-}
[ "$MODE" = quick ] && exit 0
run --precision f16 --json "$OUT/alexnet-f16.json"
run --precision f16x3 --json "$OUT/alexnet-f16x3.json"
echo "== what a default Conv2d selects (--configs auto) at each precision"
for p in f32 f16 f16x3; do run --precision "$p" --configs auto; done
BEST=${BEST:-m64n96k16-t4x12-w4-s1}
echo "== fused bias+ReLU vs none (same config; a separate ReLU pass is timed by cudnn_shapes.py below)"
run --configs "$BEST" --relu
run --configs "$BEST"
echo "== wgpu's runtime bounds checks on (WGCONV_RUNTIME_CHECKS=1) for the best config"
WGCONV_RUNTIME_CHECKS=1 "$BIN" bench --preset alexnet-conv1 --configs "$BEST"
echo "== wgconv tune: cold (--force), then from the cache"
export WGCONV_CACHE_DIR=$(mktemp -d)
TIMEFORMAT="cold tune: %R s wall (process, device and pipelines included)"
time "$BIN" tune --preset alexnet-conv1 --force
TIMEFORMAT="cached tune: %R s wall (process start-up included)"
time "$BIN" tune --preset alexnet-conv1
for p in f16 f16x3; do
    echo "== wgconv tune --precision $p (cold)"
    "$BIN" tune --preset alexnet-conv1 --force --precision "$p" --json "$OUT/tune-$p.json"
done
run --batch 32 --in-channels 64 --out-channels 64 --height 56 --width 56 --kernel 3 --stride 1 --padding 1 \
    --json "$OUT/resnet3x3.json"
run --batch 32 --in-channels 256 --out-channels 64 --height 28 --width 28 --kernel 1 --stride 1 --padding 0 \
    --json "$OUT/pointwise1x1.json"
ANCHORS=${ANCHORS_DIR:-.anchors}
[ -f "$ANCHORS/anchors.py" ] || ANCHORS=../shared/anchors
PYTHONUNBUFFERED=1 QUICK=${ANCHORS_QUICK:-1} python3 "$ANCHORS/anchors.py"
PYTHONUNBUFFERED=1 python3 scripts/cudnn_shapes.py
# Every JSON in one archive, so that the run's files stay within the device's 8.
tar -C "$OUT" -cf "$OUT/json.tar" --remove-files $(cd "$OUT" && ls *.json)
