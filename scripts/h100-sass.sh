#!/usr/bin/env bash
# On the H100 machine: time kernels and keep the SASS the driver compiled for each, one shader
# cache directory per kernel, in $OUT/sass.tar (read it here with scripts/sass.py).
# Carry .gl and target/release/wgconv (as for scripts/h100.sh; built with
# `cargo build --release -p wgconv-cli`).
# Usage: scripts/h100-sass.sh PRECISION:KERNEL...   KERNEL as `wgconv bench --configs` takes it:
#   a tile config (the precision's default family), a full kernel name or `auto`, e.g.
#   f32:m64n96k16-t4x12-w4-s1 f16:coop-stem-f16:m32n96-f2-h6 f16:auto
set -uo pipefail
source "$(dirname "$0")/h100-env.sh"
DIR=$(mktemp -d)
mkdir -p "$DIR/sass"
for spec in "$@"; do
    # The precision is the first field; the kernel keeps its own colon (family:config).
    IFS=: read -r precision config <<< "$spec"
    name="$precision-${config//:/_}"
    cache="$DIR/cache/$name"
    mkdir -p "$cache"
    __GL_SHADER_DISK_CACHE_PATH=$cache __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
        "$BIN" bench --preset alexnet-conv1 --precision "$precision" --configs "$config" 2>&1 | grep -E "^(tiled|coop|direct|auto)|error"
    blob=$(find "$cache" -name '*.bin' | head -1)
    [ -n "$blob" ] && cp "$blob" "$DIR/sass/$name.bin"
done
tar cf "$OUT/sass.tar" -C "$DIR" sass
