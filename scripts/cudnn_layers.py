#!/usr/bin/env python3
"""cuDNN's times on the distinct convolution layers of a network (cli/data/models.json), in the
format `wgconv bench --model NAME --compare FILE` reads.

For each layer (no bias, as wgconv's --model benchmark), three variants:
  fp32  strict fp32: torch.backends.cudnn.allow_tf32 = False, torch.backends.cuda.matmul.allow_tf32 = False;
        NCHW
  tf32  allow_tf32 True; the faster of NCHW and channels_last (the layout is recorded)
  fp16  half input and weights, channels_last
with torch.backends.cudnn.benchmark = True, each timed by
triton.testing.do_bench(f, warmup=25, rep=100) (median; min and max of the same samples). Each
variant's image-0 output is compared with a float64 reference (relative L2, recorded as
<variant>_err): strict fp32 lands near 1e-7, TF32 near 1e-4, so a "strict" fp32 that is not
shows there. Note: do_bench clears the L2 cache before every timed call; wgconv's bench times
back-to-back runs (warm L2), which favours wgconv on layers whose data fits in the 50 MB L2.

Usage: python3 scripts/cudnn_layers.py MODEL|all [--batch N] [--layers A,B] [--out DIR]
Writes $OUT/cudnn_<model>.json (--out, else $OUT, else the current directory):
  {"device", "torch", "cudnn", "triton", "date", "model", "batch", "method",
   "layers": {name: {"fp32": ms, "tf32": ms, "fp16": ms, "fp32_min": ms, "fp32_max": ms, ...,
                     "tf32_layout": "nchw" | "channels_last", "fp32_err": ..., ...}}}
and prints a table per model.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_JSON = os.path.join(HERE, "..", "cli", "data", "models.json")
VARIANTS = ("fp32", "tf32", "fp16")


def load_models(path=MODELS_JSON):
    with open(path) as f:
        return json.load(f)["models"]


def output_size(size, k, stride, pad):
    return (size + 2 * pad - k) // stride + 1


def layer_flops(layer, batch):
    oh = output_size(layer["h"], layer["k"], layer["stride"], layer["pad"])
    ow = output_size(layer["w"], layer["k"], layer["stride"], layer["pad"])
    k_total = layer["c_in"] // layer["groups"] * layer["k"] * layer["k"]
    return 2.0 * batch * layer["c_out"] * oh * ow * k_total


def set_tf32(torch, on):
    """The TF32 switches of the brief (the legacy flags; PyTorch >= 2.9 warns that they will
    be deprecated, and maps them onto torch.backends.cudnn.conv.fp32_precision)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cudnn.allow_tf32 = on
        torch.backends.cuda.matmul.allow_tf32 = on


def tf32_state(torch):
    """What the flags read back as (and the new API's setting, where it exists)."""
    state = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state["cudnn.allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        state["cuda.matmul.allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        try:
            state["cudnn.conv.fp32_precision"] = str(torch.backends.cudnn.conv.fp32_precision)
        except Exception:  # older PyTorch: no such setting
            pass
    return state


def time_ms(do_bench, f):
    """Median, min, max (ms) and the number of samples of do_bench(f, warmup=25, rep=100)."""
    try:
        times = do_bench(f, warmup=25, rep=100, return_mode="all")
        times = [float(t) for t in times]
        return statistics.median(times), min(times), max(times), len(times)
    except (AssertionError, TypeError, ValueError):
        # A Triton without return_mode="all": the same quantities from quantiles.
        med, lo, hi = do_bench(f, warmup=25, rep=100, quantiles=[0.5, 0.0, 1.0], return_mode="median")
        return float(med), float(lo), float(hi), None


def rel_l2(torch, got, want):
    got = got.double()
    if not bool(torch.isfinite(got).all()):
        return float("nan")
    return float((got - want).norm() / want.norm())


def bench_layer(torch, F, do_bench, layer, batch, device="cuda"):
    """The three variants of one layer: {variant: ms, variant_min, variant_max, variant_n,
    variant_err, tf32_layout, tf32_nchw, tf32_channels_last}."""
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(batch, layer["c_in"], layer["h"], layer["w"], generator=g).to(device)
    w = torch.randn(layer["c_out"], layer["c_in"] // layer["groups"], layer["k"], layer["k"], generator=g).to(device)
    stride, pad, groups = layer["stride"], layer["pad"], layer["groups"]
    want = F.conv2d(x[:1].double(), w.double(), None, stride, pad, 1, groups)
    cl = torch.channels_last
    out = {}

    def run(name, xs, ws):
        f = lambda: F.conv2d(xs, ws, None, stride, pad, 1, groups)
        y = f()  # cudnn.benchmark autotunes on this first call
        torch.cuda.synchronize()
        med, lo, hi, n = time_ms(do_bench, f)
        return med, lo, hi, n, rel_l2(torch, y[:1], want)

    def record(name, r):
        out[name], out[name + "_min"], out[name + "_max"], out[name + "_n"], out[name + "_err"] = r

    set_tf32(torch, False)
    record("fp32", run("fp32", x, w))
    out["fp32_flags"] = tf32_state(torch)
    set_tf32(torch, True)
    nchw = run("tf32 nchw", x, w)
    channels_last = run("tf32 channels_last", x.to(memory_format=cl), w.to(memory_format=cl))
    out["tf32_nchw"], out["tf32_channels_last"] = nchw[0], channels_last[0]
    best, layout = (nchw, "nchw") if nchw[0] <= channels_last[0] else (channels_last, "channels_last")
    record("tf32", best)
    out["tf32_layout"] = layout
    out["tf32_flags"] = tf32_state(torch)
    record("fp16", run("fp16", x.half().to(memory_format=cl), w.half().to(memory_format=cl)))
    set_tf32(torch, False)
    return out


def fmt(v, spec=".4f"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def print_table(model, batch, layers, results):
    name_w = max([len("layer")] + [len(l["name"]) for l in layers])
    print(f"== cuDNN on {model}, batch {batch} (median ms of triton do_bench; err: relative L2 of image 0)")
    print(f"{'layer':<{name_w}} {'count':>5} {'fp32 ms':>10} {'fp32 err':>9} {'tf32 ms':>10} {'layout':>13} "
          f"{'tf32 err':>9} {'fp16 ms':>10} {'fp16 err':>9} {'fp32 TFLOP/s':>12}")
    totals = {v: 0.0 for v in VARIANTS}
    for layer in layers:
        r = results.get(layer["name"], {})
        tflops = layer_flops(layer, batch) / r["fp32"] / 1e9 if r.get("fp32") else None
        print(f"{layer['name']:<{name_w}} {layer['count']:>5} {fmt(r.get('fp32')):>10} {fmt(r.get('fp32_err'), '.1e'):>9} "
              f"{fmt(r.get('tf32')):>10} {r.get('tf32_layout', '-'):>13} {fmt(r.get('tf32_err'), '.1e'):>9} "
              f"{fmt(r.get('fp16')):>10} {fmt(r.get('fp16_err'), '.1e'):>9} {fmt(tflops, '.2f'):>12}")
        for v in VARIANTS:
            if totals[v] is not None and r.get(v) is not None:
                totals[v] += r[v] * layer["count"]
            else:
                totals[v] = None
    print("network total (sum of median x count): " + ", ".join(f"{v} {fmt(totals[v])} ms" for v in VARIANTS))


def main(argv=None):
    models = load_models()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="one of " + ", ".join(sorted(models)) + ", or all")
    p.add_argument("--batch", type=int, help="batch (default: the model's)")
    p.add_argument("--layers", help="comma-separated layer names (default: every layer)")
    p.add_argument("--out", help="output directory (default: $OUT, else the current directory)")
    a = p.parse_args(argv)
    names = sorted(models) if a.model == "all" else [a.model]
    for n in names:
        if n not in models:
            p.error(f"unknown model {n!r}; known models: {', '.join(sorted(models))}")
    out_dir = a.out or os.environ.get("OUT", ".")

    import torch
    import torch.nn.functional as F
    import triton
    from triton.testing import do_bench

    if not torch.cuda.is_available():
        sys.exit("cudnn_layers.py: no CUDA device")
    torch.backends.cudnn.benchmark = True
    device = torch.cuda.get_device_name()
    written = []
    for n in names:
        m = models[n]
        batch = a.batch or m["batch"]
        layers = m["layers"]
        if a.layers:
            wanted = [s.strip() for s in a.layers.split(",") if s.strip()]
            unknown = [s for s in wanted if s not in {l["name"] for l in layers}]
            if unknown:
                p.error(f"{n} has no layer {', '.join(unknown)}; its layers: {', '.join(l['name'] for l in layers)}")
            layers = [l for l in layers if l["name"] in wanted]
        results = {}
        for i, layer in enumerate(layers):
            print(f"[{i + 1}/{len(layers)}] {n} {layer['name']}", file=sys.stderr, flush=True)
            results[layer["name"]] = bench_layer(torch, F, do_bench, layer, batch)
        doc = {
            "device": device,
            "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(),
            "triton": getattr(triton, "__version__", None),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "model": n,
            "batch": batch,
            "method": "F.conv2d, no bias, cudnn.benchmark=True; triton.testing.do_bench(warmup=25, rep=100): median "
                      "(min, max of the same samples); fp32: allow_tf32 False (cudnn and matmul); tf32: allow_tf32 "
                      "True, faster of NCHW and channels_last; fp16: half, channels_last",
            "layers": results,
        }
        path = os.path.join(out_dir, f"cudnn_{n}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        written.append(path)
        print_table(n, batch, layers, results)
        bad = [l for l, r in results.items() if not (r.get("fp32_err", 1.0) <= 1e-5)]
        if bad:
            print(f"warning: strict fp32 is not fp32-accurate (err > 1e-5) on {', '.join(bad)}", flush=True)
        print(f"wrote {path}", flush=True)
    return written


if __name__ == "__main__":
    main()
