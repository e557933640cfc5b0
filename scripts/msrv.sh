#!/usr/bin/env bash
# Checks the library's stated MSRV (`rust-version` in Cargo.toml): no dependency of the
# library (default features) declares a newer rust-version, and, where rustup has that
# toolchain installed, `cargo +MSRV check -p wgconv` passes. Without the toolchain the
# second step is skipped with a message (installing one needs the network).
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -1)
echo "stated MSRV: $msrv"
cargo metadata --format-version 1 --filter-platform "$(rustc -vV | sed -n 's/host: //p')" | python3 -c '
import json, sys
msrv = tuple(int(x) for x in sys.argv[1].split("."))
meta = json.load(sys.stdin)
ids = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = next(p["id"] for p in meta["packages"] if p["name"] == "wgconv")
seen, stack = set(), [root]
while stack:  # normal dependencies only: what a user of the library compiles
    i = stack.pop()
    if i in seen:
        continue
    seen.add(i)
    for d in nodes[i]["deps"]:
        if any(k["kind"] is None for k in d["dep_kinds"]):
            stack.append(d["pkg"])
worst = []
for i in seen:
    rv = ids[i].get("rust_version")
    if rv and tuple(int(x) for x in rv.split(".")) > msrv:
        pkg = ids[i]
        worst.append("%s %s needs %s" % (pkg["name"], pkg["version"], rv))
if worst:
    sys.exit("dependencies newer than the MSRV: " + "; ".join(worst))
print(f"{len(seen)} crates (default features), none declares a rust-version above the MSRV")
' "$msrv"
if rustup toolchain list 2>/dev/null | grep -q "^$msrv"; then
    cargo "+$msrv" check -p wgconv
else
    echo "skipped: cargo +$msrv check (toolchain $msrv not installed: rustup toolchain install $msrv)"
fi
