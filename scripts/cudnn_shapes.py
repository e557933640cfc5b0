"""cuDNN (strict fp32 and TF32) on the shapes wgconv's benchmark notes report, measured in
the same run as wgconv's own numbers (scripts/h100.sh). Prints one line per case; writes
cudnn_shapes.json under $OUT."""
import json, os
import torch
import torch.nn.functional as F
from triton.testing import do_bench

OUT = os.environ.get("OUT", "/tmp")
dev = "cuda"
torch.manual_seed(0)
CASES = [  # name, N, C_in, H, W, C_out, K, stride, pad
    ("alexnet_conv1", 256, 3, 224, 224, 96, 11, 4, 2),
    ("resnet_3x3", 32, 64, 56, 56, 64, 3, 1, 1),
    ("pointwise_1x1", 32, 256, 28, 28, 64, 1, 1, 0),
]
res = {}
for name, n, c, h, w, k, r, s, p in CASES:
    x = torch.randn(n, c, h, w, device=dev)
    wt = torch.randn(k, c, r, r, device=dev)
    b = torch.randn(k, device=dev)
    ref = F.conv2d(x.double(), wt.double(), b.double(), s, p)
    oh = ref.shape[2]; ow = ref.shape[3]
    flops = 2 * n * k * oh * ow * c * r * r
    for tf32 in (False, True):
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
        f = lambda: F.conv2d(x, wt, b, s, p)
        out = f()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        t = do_bench(f, warmup=100, rep=400, return_mode="median")
        key = f"{name} cudnn {'tf32' if tf32 else 'fp32'}"
        res[key] = dict(ms=t, tflops=flops / t / 1e9, err=err)
        print(f"{key:40s} {t:8.3f} ms {flops / t / 1e9:7.1f} TFLOP/s err {err:.2e}", flush=True)
    if name == "alexnet_conv1":
        torch.backends.cudnn.allow_tf32 = False
        g = lambda: torch.relu(F.conv2d(x, wt, b, s, p))
        t = do_bench(g, warmup=100, rep=400, return_mode="median")
        y = f()
        t_relu = do_bench(lambda: torch.relu_(y), warmup=100, rep=400, return_mode="median")
        res["alexnet_conv1 cudnn fp32 + relu (2 kernels)"] = dict(ms=t)
        res["alexnet_conv1 relu pass alone"] = dict(ms=t_relu)
        print(f"{'alexnet_conv1 cudnn fp32 + separate relu':40s} {t:8.3f} ms; relu pass alone {t_relu:.3f} ms", flush=True)
json.dump(res, open(os.path.join(OUT, "cudnn_shapes.json"), "w"), indent=1)
