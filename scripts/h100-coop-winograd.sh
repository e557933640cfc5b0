#!/usr/bin/env bash
# BENCHMARKS.md "Winograd's GEMM on the matrix units (`coop-winograd-f32`) and the H200":
# the layers the Winograd rule may take (3×3 and 5×5, stride 1) of AlexNet (N = 128), VGG-16
# (N = 16) and ResNet-50 (N = 32 and 8), what a default Conv2d runs beside `winograd-f4` at
# two GEMM tiles and `coop-winograd-f32` at five, in ONE call. Meant for the device machine
# (H100 or H200): carry .gl (Vulkan loader debs) and the wgconv binary (`cargo build
# --release -p wgconv-cli`; WGCONV_BIN names it). About 2 minutes.
# Usage: scripts/h100-coop-winograd.sh   (then, here, unpack OUT/coop-winograd.tgz: a table
# and a JSON per model and batch)
set -uo pipefail
source "$(dirname "$0")/h100-env.sh"
export WGCONV_COOP=1
exec > >(tee -a "$OUT/coop-winograd.log") 2>&1
date -u
F=coop-winograd-f32
C=auto,winograd-f4:m64n96k16-t4x12-w4-s1,winograd-f4:m64n128k16-t4x8-w8-s1
for t in m128n128k32-t8x8-w8-s1 m64n64k16-t4x8-w4-s1 m64n128k32-t8x8-w4-s1 m64n64k64-t4x8-w4-s1 \
    m128n64k32-t8x8-w4-s1; do
    C="$C,$F:$t"
done
# Each run's table and JSON go into one archive under OUT at once (the device returns few
# files: OUT holds only the archive and the log, also when the call's time limit cuts a run).
W=$(mktemp -d)
run() { # model batch layers
    "$BIN" bench --model "$1" --batch "$2" --layers "$3" --precision f32 --runs 20 --configs "$C" \
        --json "$W/coop_winograd_$1_$2.json" > "$W/coop_winograd_$1_$2.txt"
    tar -C "$W" -czf "$OUT/coop-winograd.tgz" .
}
run alexnet 128 conv2.5x5,conv3.3x3,conv4.3x3,conv5.3x3
run vgg16 16 c1_2.64-64,c2_1.64-128,c2_2.128-128,c3_1.128-256,c3_2.256-256,c4_1.256-512,c4_2.512-512,c5.512-512
run resnet50 32 l1.3x3.64,l2.3x3.128,l3.3x3.256,l4.3x3.512
run resnet50 8 l1.3x3.64,l2.3x3.128,l3.3x3.256,l4.3x3.512
date -u
