#!/usr/bin/env python3
"""Read the SASS NVIDIA's Vulkan driver compiled for a wgconv kernel.

The driver keeps every pipeline it compiles in its shader disk cache
(`__GL_SHADER_DISK_CACHE_PATH`, default ~/.cache/nvidia/GLCache): a `.bin` file of
zstd frames, one of which holds the raw SM90 instruction stream. scripts/h100-sass.sh
collects those files on the H100 machine, one cache directory per kernel; this script
finds the code in each, disassembles it with nvdisasm's raw mode (`-b SM90`) and prints
what decides the kernel's speed: registers per invocation (and so workgroups per SM),
spills, and the instruction mix of the hottest loop.

Needs: the `zstandard` module and an `nvdisasm` (CUDA 12+; the PyPI wheel
`nvidia-cuda-nvdisasm` ships one). Usage:
    scripts/sass.py [--nvdisasm PATH] [--dump DIR] BLOB.bin...
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# EXIT, unpredicated, in the SM90 encoding: the low 8 bytes of the instruction.
EXIT = b"\x4d\x79" + b"\0" * 6
LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def frames(blob):
    """Every zstd frame of a cache file, decompressed (frames that fail are skipped)."""
    at = [i for i in range(len(blob)) if blob.startswith(ZSTD_MAGIC, i)]
    for i in at:
        try:
            yield zstandard.ZstdDecompressor().decompressobj().decompress(blob[i:])
        except zstandard.ZstdError:
            pass


def disassemble(nvdisasm, code):
    """Raw SM90 text of `code`, or None where nvdisasm rejects it."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(code)
        f.flush()
        r = subprocess.run([nvdisasm, "-b", "SM90", f.name], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 and "fatal" not in r.stderr else None


def kernel_text(nvdisasm, raw):
    """The instruction stream in a frame: it ends at the last EXIT; its start is the
    longest 16-byte-aligned span before that which nvdisasm accepts (binary search)."""
    exits = [j for j in range(0, len(raw) - 8) if raw[j : j + 8] == EXIT]
    if not exits:
        return None
    end = exits[-1] + 16
    lo, hi = 1, end // 16
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if disassemble(nvdisasm, raw[end - 16 * mid : end]):
            lo = mid
        else:
            hi = mid - 1
    return disassemble(nvdisasm, raw[end - 16 * lo : end])


def opcodes(text):
    """(address, opcode without modifiers, full text) per instruction."""
    out = []
    for m in LINE.finditer(text):
        body = m.group(2).split()
        op = body[1] if body[0].startswith("@") else body[0]
        out.append((int(m.group(1), 16), op.split(".")[0], m.group(2)))
    return out


def hottest_loop(ins):
    """The backward branch whose body holds the most FFMA/HMMA: the K loop."""
    addr = [a for a, _, _ in ins]
    best = None
    for i, (a, op, txt) in enumerate(ins):
        m = re.search(r"BRA 0x([0-9a-f]+)", txt)
        if op == "BRA" and m and int(m.group(1), 16) < a and int(m.group(1), 16) in addr:
            body = collections.Counter(o for _, o, _ in ins[addr.index(int(m.group(1), 16)) : i + 1])
            work = body["FFMA"] + body["HMMA"]
            if best is None or work > best[0]:
                best = (work, sum(body.values()), body)
    return best


def report(path, nvdisasm, dump):
    blob = open(path, "rb").read()
    texts = [t for t in (kernel_text(nvdisasm, raw) for raw in frames(blob)) if t]
    if not texts:
        return f"{os.path.basename(path)}: no SM90 code found"
    # The conv kernel is the cache entry with the most multiply-adds.
    text = max(texts, key=lambda t: t.count("FFMA") + t.count("HMMA"))
    if dump:
        os.makedirs(dump, exist_ok=True)
        open(os.path.join(dump, os.path.basename(path) + ".sass"), "w").write(text)
    ins = opcodes(text)
    ops = collections.Counter(o for _, o, _ in ins)
    regs = max([int(r) for r in re.findall(r"\bR(\d+)\b", text)] + [0]) + 1
    line = (
        f"{os.path.basename(path)}: registers >= {regs}, {len(ins)} instructions, "
        f"FFMA {ops['FFMA']}, HMMA {ops['HMMA']}, spills (LDL/STL) {ops['LDL'] + ops['STL']}"
    )
    loop = hottest_loop(ins)
    if loop:
        work, n, body = loop
        line += (
            f" | K loop: {n} instructions, {100 * work / n:.0f} % FFMA/HMMA, "
            f"LDS {body['LDS'] + body['LDSM']}, STS {body['STS']}, LDG {body['LDG']}, BAR {body['BAR']}"
        )
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("blobs", nargs="+")
    ap.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "nvdisasm")
    ap.add_argument("--dump", metavar="DIR", help="write each kernel's disassembly to DIR")
    args = ap.parse_args()
    for path in args.blobs:
        print(report(path, args.nvdisasm, args.dump))


if __name__ == "__main__":
    sys.exit(main())
