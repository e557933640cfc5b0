#!/usr/bin/env python3
"""Network totals and per-layer times of `wgconv bench --model ... --json` files, side by side.

Each file's total is the sum over its layers of the first kernel's median (the default with
`--configs auto`) times the layer's multiplicity; then one row per layer with each file's
median in ms and the last file's over the first's. The times are read from every outcome
that has them, WRONG ones included (timing-only variants). The files must hold the same
layers (one model).

Usage: scripts/model_totals.py A.json B.json [C.json ...]
"""
import json
import sys


def medians(path):
    """Per layer (in file order): name, multiplicity, the first kernel's median (or None)."""
    rows = []
    for layer in json.load(open(path))["layers"]:
        results = layer.get("results") or []
        time = results[0]["outcome"].get("time_ms") if results else None
        rows.append((layer["name"], layer.get("count", 1), time["median"] if time else None))
    return rows


def main():
    paths = sys.argv[1:]
    if len(paths) < 2:
        sys.exit(__doc__)
    files = [medians(p) for p in paths]
    names = [name for name, _, _ in files[0]]
    if any([name for name, _, _ in f] != names for f in files):
        sys.exit("the files hold different layers")
    for path, rows in zip(paths, files):
        known = [(count, t) for _, count, t in rows if t is not None]
        print(f"{path}: total {sum(c * t for c, t in known):.4f} ms over {len(known)} of {len(rows)} layers")
    width = max(len(n) for n in names)
    for i, name in enumerate(names):
        times = [f[i][2] for f in files]
        cells = " ".join("       -" if t is None else f"{t:8.4f}" for t in times)
        ratio = f"{times[-1] / times[0]:.3f}" if times[0] and times[-1] else "-"
        print(f"{name:<{width}} {cells}  {ratio}")


if __name__ == "__main__":
    main()
