#!/usr/bin/env bash
# BENCHMARKS.md "Where the networks stand": per model, cuDNN (strict fp32, TF32, fp16;
# scripts/cudnn_layers.py) and what a default Conv2d runs, in f32 (NCHW f32 tensors) and in
# f16 (channels-last f16 tensors, what the matrix kernels want), in ONE call, so every ratio
# comes from one device run. Meant for the device machine: carry .gl (Vulkan loader debs) and
# the wgconv binary (`cargo build --release -p wgconv-cli`; WGCONV_BIN names it).
# Usage: scripts/h100-stand.sh [MODEL...]   (default: all five; about 6 minutes)
# Then, here: scripts/model_totals.py OUT/stand_*_f16.json (or read the .txt tables).
set -uo pipefail
source "$(dirname "$0")/h100-env.sh"
export WGCONV_COOP=1
exec > >(tee -a "$OUT/stand.log") 2>&1
date -u
for m in ${*:-resnet50 resnext50_32x4d mobilenet_v2 vgg16 alexnet}; do
    echo "=== $m"
    PYTHONUNBUFFERED=1 python3 scripts/cudnn_layers.py "$m" --out "$OUT" || continue
    # VGG-16's f32 CPU reference alone takes about a minute.
    "$BIN" bench --model "$m" --precision f32 --configs auto --compare "$OUT/cudnn_$m.json" \
        --json "$OUT/stand_${m}_f32.json"
    "$BIN" bench --model "$m" --precision f16 --layout nhwc --storage f16 --configs auto \
        --compare "$OUT/cudnn_$m.json" --json "$OUT/stand_${m}_f16.json"
    date -u
done
# One archive: the device returns at most 8 files.
tar -C "$OUT" -czf "$OUT/stand.tgz" --remove-files $(cd "$OUT" && ls *.json)
