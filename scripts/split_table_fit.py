#!/usr/bin/env python3
"""How well the split kernels' table ranks its blocks on measured sweeps, and a grid search.

The table is `select::CHANNELS_LAST_SPLIT_CONFIGS` (f32 on the matrix units and f16x3), read
from src/select.rs with `SPLIT_SMALL_STEPS` and `SPLIT_EPILOGUE_MULTIPLY_ADDS`: each
block with a rate per padded multiply-add relative to the 128x128 block and the workgroups it
runs per multiprocessor, ranked in whole waves with an epilogue of
`SPLIT_EPILOGUE_MULTIPLY_ADDS` per output element shared among the resident workgroups. This
script repeats that ranking (`estimated_best_in_waves`) on the layers of `wgconv bench --json`
files whose five blocks were all timed, and reports, per file, the geometric mean of each
layer's best measured time over its pick's and the layers whose pick is under a threshold of
their best. With --search it tries rates, workgroup counts and epilogues around the table's
and lists the settings with the fewest such layers. Refit on a new device from a sweep like

    wgconv bench --model NAME [--batch B] --precision f32 --configs auto,<the five blocks as
        coop-nhwc-f32:CONFIG> --json sweep.json

(the blocks: m128n128k32-t8x8-w8-s1, m128n64k32-t8x8-w4-s1, m64n128k32-t8x8-w4-s1,
m64n64k64-t4x8-w4-s1, m64n64k16-t4x8-w4-s1; f16x3 sweeps name coop-nhwc-f16x3 instead), and
keep the layers the matrix path runs or nearly wins (--near).

Usage: scripts/split_table_fit.py [--multiprocessors 132] [--threshold 0.95] [--near 1.1]
                                  [--search] sweep.json [...]
"""
import argparse
import itertools
import json
import math
import os
import re

SELECT_RS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "select.rs")


def table_from_source(path=SELECT_RS):
    """The table and the epilogue as src/select.rs holds them: {config name: (rate, per_mp)}."""
    source = open(path).read()
    tile = r"TileConfig::with_thread_tile\((\d+), (\d+), (\d+), (\d+), (\d+), (\d+)\), ([\d.]+), (\d+)\)"

    def name(bm, bn, bk, tm, tn, stages):
        # TileConfig::name(): warps = block_m·block_n / (thread_m·thread_n) / 32.
        warps = int(bm) * int(bn) // (int(tm) * int(tn)) // 32
        return f"m{bm}n{bn}k{bk}-t{tm}x{tn}-w{warps}-s{stages}"

    body = source.split("const CHANNELS_LAST_SPLIT_CONFIGS", 1)[1].split("];", 1)[0]
    small = source.split("const SPLIT_SMALL_STEPS", 1)[1].split(";", 1)[0]
    table = {}
    for m in re.finditer(tile, body + small):
        *geometry, rate, per_mp = m.groups()
        table[name(*geometry)] = (float(rate), int(per_mp))
    epilogue = float(re.search(r"const SPLIT_EPILOGUE_MULTIPLY_ADDS: f64 = ([\d.]+);", source).group(1))
    return table, epilogue


FAMILIES = ("coop-nhwc-f32:", "coop-nhwc-f16x3:")


def layers(path, near, table):
    """The layers of a bench JSON file with every block of the table timed: geometry and times."""
    out = []
    for layer in json.load(open(path))["layers"]:
        times, others = {}, []
        for r in layer.get("results") or []:
            t = r["outcome"].get("time_ms") if r["outcome"].get("status") == "ok" else None
            if t is None:
                continue
            family, _, config = r["kernel"].partition(":")
            if family + ":" in FAMILIES and config in table:
                times[config] = t["median"]
            else:
                others.append(t["median"])
        if len(times) < len(table):
            continue
        if others and min(times.values()) > near * min(others):
            continue
        spec, output = layer["problem"]["spec"], layer["problem"]["output"]
        groups = spec["groups"]
        channels = -(-(spec["in_channels"] // groups) // 8) * 8
        out.append({
            "name": layer["name"],
            "m": output["n"] * output["h"] * output["w"],
            "n": spec["out_channels"] // groups,
            "groups": groups,
            "k": channels * spec["kernel"][0] * spec["kernel"][1],
            "times": times,
        })
    return out


def cost(layer, config, rate, per_mp, epilogue, multiprocessors):
    bm, bn, bk = map(int, re.match(r"m(\d+)n(\d+)k(\d+)", config).groups())
    tiles = -(-layer["m"] // bm) * -(-layer["n"] // bn) * layer["groups"]
    work = bm * bn * (-(-layer["k"] // bk) * bk) + epilogue * bm * bn / per_mp
    slots = per_mp * multiprocessors
    return max(1, -(-tiles // slots)) * slots * work / rate


def score(sets, table, epilogue, multiprocessors, threshold):
    """Per set: geometric mean of best / pick, and the layers under the threshold."""
    result = []
    for rows in sets:
        logs, under = [], []
        for layer in rows:
            pick = min(table, key=lambda c: cost(layer, c, *table[c], epilogue, multiprocessors))
            ratio = min(layer["times"].values()) / layer["times"][pick]
            logs.append(math.log(ratio))
            if ratio < threshold:
                under.append((layer["name"], pick, round(ratio, 3)))
        result.append((math.exp(sum(logs) / len(logs)) if logs else float("nan"), under))
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--multiprocessors", type=int, default=132)
    ap.add_argument("--threshold", type=float, default=0.95)
    ap.add_argument("--near", type=float, default=1.1,
                    help="keep layers whose best block is within this of the best other kernel timed")
    ap.add_argument("--search", action="store_true")
    args = ap.parse_args()
    table, epilogue = table_from_source()
    sets = [layers(p, args.near, table) for p in args.files]
    scored = score(sets, table, epilogue, args.multiprocessors, args.threshold)
    for path, rows, (geo, under) in zip(args.files, sets, scored):
        print(f"{path}: {len(rows)} layers, best / pick {geo:.4f}, {len(under)} under {args.threshold}: {under}")
    if not args.search:
        return
    configs = list(table)
    trials = []
    for r1, r2, r3, r4, slots, extra in itertools.product(
            (0.45, 0.5, 0.55, 0.6, 0.65), (0.5, 0.55, 0.6, 0.65), (0.5, 0.55, 0.6, 0.65),
            (0.7, 0.75, 0.8, 0.85, 0.9), (2, 3, 4), (0, 64, 96, 128)):
        trial = dict(zip(configs, ((1.0, 1), (r1, 1), (r2, 1), (r3, 1), (r4, slots))))
        scored = score(sets, trial, extra, args.multiprocessors, args.threshold)
        under = sum(len(u) for _, u in scored)
        logs = sum(math.log(g) * len(rows) for (g, _), rows in zip(scored, sets) if rows)
        trials.append((under, -logs, (r1, r2, r3, r4, slots, extra)))
    trials.sort()
    print("fewest layers under the threshold (rates of 128x64, 64x128, 64x64 K-64, small steps; "
          "small steps per multiprocessor; epilogue):")
    for under, neg_logs, setting in trials[:10]:
        print(f"  {under} under, sum of log(best / pick) {-neg_logs:.4f}: {setting}")


if __name__ == "__main__":
    main()
