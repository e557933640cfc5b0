#!/usr/bin/env bash
# A/B of wgconv binaries on the networks' default kernels: the binaries alternate, model by
# model and round by round, in ONE call, so that the device's state and the run-to-run
# spread (3-5 % on some layers across calls) fall on all of them alike. Meant for the device
# machine: carry .gl and the binaries (built here; each a copy of target/release/wgconv).
# Usage: ROUNDS=2 scripts/h100-ab.sh "BIN_A BIN_B ..." MODEL... [-- extra bench flags, e.g. --runs 20]
#   e.g. scripts/h100-ab.sh ".h100/before .h100/after" resnet50 mobilenet_v2 -- --precision f16 --layout nhwc --storage f16
# Each run writes OUT/ab_<model>_<binary>_<round>.json; compare here with
#   scripts/model_totals.py OUT/ab_resnet50_before_1.json OUT/ab_resnet50_after_1.json ...
# A binary may compute wrong results (a timing-only variant): the bench marks it WRONG and
# ranks nothing, and its times are still in the JSON.
set -uo pipefail
source "$(dirname "$0")/h100-env.sh"
export WGCONV_COOP=1
BINS=$1
shift
MODELS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do MODELS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
exec > >(tee -a "$OUT/ab.log") 2>&1
date -u
for round in $(seq 1 "${ROUNDS:-2}"); do
    for m in "${MODELS[@]}"; do
        for bin in $BINS; do
            name=$(basename "$bin")
            echo "=== round $round, $m, $name"
            "$bin" bench --model "$m" --configs auto "$@" --json "$OUT/ab_${m}_${name}_$round.json" | tail -12
        done
    done
done
date -u
tar -C "$OUT" -czf "$OUT/ab.tgz" --remove-files $(cd "$OUT" && ls ab_*.json)
