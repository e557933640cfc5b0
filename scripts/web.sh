#!/usr/bin/env bash
# wgconv in the browser: builds the wasm package (web/, package wgconv-web) into
# examples/web/pkg and serves the example page, or runs the browser tests headless.
#
#   bash scripts/web.sh [serve]  build, then serve examples/web at http://localhost:8000/ (PORT=…)
#   bash scripts/web.sh build    build only: cargo (wasm32-unknown-unknown, release),
#                                wasm-bindgen (--target web), wasm-opt -Oz where binaryen is there
#   bash scripts/web.sh test     build, then run examples/web/tests.html in headless Chromium on
#                                SwiftShader (WebGPU on the CPU); prints `N passed, M failed` last,
#                                exits non-zero on a failure
#   bash scripts/web.sh shot     build, then screenshot the example page to examples/web/screenshot.png
#
# What it needs and installs when missing: the wasm32-unknown-unknown target (rustup), the
# wasm-bindgen CLI of the same version as the wasm-bindgen crate in Cargo.lock (cargo
# install), and for test/shot Debian's chromium and binaryen (apt-get, as root or through
# sudo). No node toolchain: the page is plain HTML and ES modules.
#
# Env: PORT (serve), WEB_TEST_TIMEOUT (s, default 1200), CHROMIUM (the browser binary),
#      WASM_OPT=0 (skip wasm-opt).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '== %s\n' "$*"; }
mode="${1:-serve}"

if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
export PATH="$PATH:$HOME/.cargo/bin"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
WASM=wasm32-unknown-unknown
PKG=examples/web/pkg

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "error: installing $* needs root or sudo" >&2; return 1; fi
}
apt_updated=""
apt_install() {
    command -v apt-get >/dev/null || { echo "error: no apt-get to install $*: install it yourself" >&2; return 1; }
    local s; s=$(date +%s)
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$apt_updated" ]; then as_root apt-get update -q >/dev/null; apt_updated=1; fi
    as_root apt-get install -y -q --no-install-recommends "$@" >/dev/null
    say "installed $* in $(( $(date +%s) - s )) s"
}

# --- Tools ---------------------------------------------------------------------------
tools() {
    if ! rustup target list --installed 2>/dev/null | grep -qx "$WASM"; then
        say "rustup target add $WASM"
        rustup target add "$WASM"
    fi
    # wasm-bindgen's CLI must match the crate exactly (the generated JS glue and the
    # custom sections of the .wasm are version-specific).
    local want have
    want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
    have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
    if [ "$have" != "$want" ]; then
        say "cargo install wasm-bindgen-cli $want (found: ${have:-none})"
        local s; s=$(date +%s)
        # --locked where the registry has every locked dependency; else the newest compatible.
        cargo install --quiet wasm-bindgen-cli --version "$want" --locked \
            || cargo install --quiet wasm-bindgen-cli --version "$want"
        say "installed wasm-bindgen-cli $want in $(( $(date +%s) - s )) s"
    fi
}

browser() {
    CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
    if [ -z "$CHROMIUM" ]; then
        apt_install chromium
        CHROMIUM=$(command -v chromium)
    fi
    command -v wasm-opt >/dev/null || apt_install binaryen || say "no binaryen: the package is not run through wasm-opt"
}

# --- Build ---------------------------------------------------------------------------
build() {
    tools
    say "cargo build -p wgconv-web --target $WASM --release"
    cargo build --quiet -p wgconv-web --target "$WASM" --release
    local raw="$TARGET_DIR/$WASM/release/wgconv_web.wasm"
    # wasm-opt runs on cargo's output, before wasm-bindgen: binaryen 108 (Debian 12's) breaks
    # the externref table that wasm-bindgen 0.2.130 adds (the page then fails in
    # WebAssembly.Table.set), while it optimises the module before that table exists well,
    # and wasm-bindgen keeps the result (it reads its descriptions from custom sections and
    # the describe functions, which wasm-opt leaves alone).
    if [ "${WASM_OPT:-1}" = 0 ]; then
        say "WASM_OPT=0: the package is not run through wasm-opt"
    elif command -v wasm-opt >/dev/null; then
        # The features rustc's wasm32 target emits by default.
        if wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
            --enable-mutable-globals --enable-multivalue --enable-reference-types \
            "$raw" -o "$raw.opt.wasm" 2>"$TARGET_DIR/wasm-opt.log"; then
            raw="$raw.opt.wasm"
        else
            say "wasm-opt failed (see $TARGET_DIR/wasm-opt.log): the package is not optimised further"
        fi
    else
        say "no wasm-opt (Debian: apt-get install binaryen): the package is not optimised further"
    fi
    rm -rf "$PKG"
    wasm-bindgen --target web --no-typescript --out-dir "$PKG" --out-name wgconv_web "$raw"
    local wasm="$PKG/wgconv_web_bg.wasm"
    local bytes gz
    bytes=$(stat -c %s "$wasm")
    gz=$(gzip -9c "$wasm" | wc -c)
    say "built $PKG: wgconv_web_bg.wasm $((bytes / 1024)) KiB ($((gz / 1024)) KiB gzipped)"
}

# --- Serve / test --------------------------------------------------------------------
tmp=""
server_pid=""
browser_pid=""
cleanup() {
    local rc=$?
    # Chromium runs in its own session (setsid): its whole process group goes, and its
    # profile is removed once it has stopped writing there.
    if [ -n "$browser_pid" ]; then
        kill -- "-$browser_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 -- "-$browser_pid" 2>/dev/null || break; sleep 0.1; done
    fi
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    [ -n "$tmp" ] && rm -rf "$tmp" 2>/dev/null || true
    exit "$rc"
}

start_server() {
    tmp=$(mktemp -d)
    trap cleanup EXIT
    python3 scripts/web_server.py examples/web --port 0 --port-file "$tmp/port" --report "$tmp/report.json" --quiet &
    server_pid=$!
    for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
    [ -s "$tmp/port" ] || { echo "error: the server did not start" >&2; exit 1; }
    port=$(cat "$tmp/port")
}

# WebGPU on SwiftShader (Vulkan on the CPU) in headless Chromium, as root in a container.
CHROME_FLAGS=(--headless=new --no-sandbox --enable-unsafe-webgpu --enable-features=Vulkan
    --use-vulkan=swiftshader --enable-unsafe-swiftshader --no-first-run --no-default-browser-check
    --disable-dev-shm-usage)

case "$mode" in
build)
    build
    ;;
serve)
    build
    say "serving the example: open http://localhost:${PORT:-8000}/ (tests: /tests.html); Ctrl-C stops"
    exec python3 scripts/web_server.py examples/web --port "${PORT:-8000}"
    ;;
test)
    browser
    build
    start_server
    say "browser tests: $CHROMIUM on SwiftShader, http://localhost:$port/tests.html"
    setsid "$CHROMIUM" "${CHROME_FLAGS[@]}" --user-data-dir="$tmp/profile" \
        "http://localhost:$port/tests.html" >"$tmp/chromium.log" 2>&1 &
    browser_pid=$!
    limit=${WEB_TEST_TIMEOUT:-1200}
    start=$(date +%s)
    while [ ! -s "$tmp/report.json" ]; do
        if ! kill -0 "$browser_pid" 2>/dev/null; then
            say "chromium exited before reporting:"; tail -n 30 "$tmp/chromium.log"; break
        fi
        if [ $(( $(date +%s) - start )) -gt "$limit" ]; then
            say "no report after $limit s:"; tail -n 30 "$tmp/chromium.log"; break
        fi
        sleep 1
    done
    if [ ! -s "$tmp/report.json" ]; then
        echo "0 passed, 1 failed"
        exit 1
    fi
    say "browser tests took $(( $(date +%s) - start )) s"
    python3 - "$tmp/report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for t in r.get("timings", []):
    print("timing:", json.dumps(t))
print(f"{r['passed']} passed, {r['failed']} failed")
sys.exit(1 if r["failed"] or r["passed"] < 20 else 0)
EOF
    ;;
shot)
    browser
    build
    start_server
    python3 scripts/web_shot.py "http://localhost:$port/index.html" examples/web/screenshot.png --width 1200 \
        -- "$CHROMIUM" "${CHROME_FLAGS[@]}" --user-data-dir="$tmp/profile" --hide-scrollbars
    ;;
*)
    echo "usage: bash scripts/web.sh [serve|build|test|shot]" >&2
    exit 2
    ;;
esac
