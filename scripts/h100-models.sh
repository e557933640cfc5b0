#!/usr/bin/env bash
# The network tables of BENCHMARKS.md ("Networks"): per model, cuDNN (strict fp32, TF32, fp16;
# scripts/cudnn_layers.py) and wgconv's model benchmark in f32 (with the direct kernel) and
# f16, in the same run. Meant for the device machine: carry .gl (Vulkan loader debs) and the
# wgconv binary (`cargo build --release -p wgconv-cli`; WGCONV_BIN names it).
# Usage: scripts/h100-models.sh [MODEL...]   (default: all five; about 2 minutes each)
set -uo pipefail
source "$(dirname "$0")/h100-env.sh"
exec > >(tee -a "$OUT/models.log") 2>&1
date -u
MODELS=${*:-resnet50 mobilenet_v2 vgg16 resnext50_32x4d alexnet}
for m in $MODELS; do
    echo "=== $m"
    PYTHONUNBUFFERED=1 python3 scripts/cudnn_layers.py "$m" || continue
    "$BIN" bench --model "$m" --direct --json "$OUT/model_$m.json" --compare "$OUT/cudnn_$m.json"
    "$BIN" bench --model "$m" --precision f16 --json "$OUT/model_${m}_f16.json" --compare "$OUT/cudnn_$m.json"
done
# One archive: the device returns at most 8 files.
tar -C "$OUT" -czf "$OUT/models.tgz" --remove-files $(cd "$OUT" && ls *.json)
