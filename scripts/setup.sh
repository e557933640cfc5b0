#!/usr/bin/env bash
# Sourced by scripts/test.sh and scripts/main.sh: makes sure a Vulkan driver and cargo are
# there. On a Linux machine without any Vulkan driver (a CI runner, a server without GPU) it
# installs Mesa lavapipe (Vulkan on the CPU) with apt-get, as root or through sudo; a machine
# with a driver is left untouched. Expects `say` and the repository root as the working dir.

# --- Vulkan driver -------------------------------------------------------------------
have_icd() {
    local f
    for f in ${VK_DRIVER_FILES:-} ${VK_ICD_FILENAMES:-}; do
        [ -f "$f" ] && return 0
    done
    for f in /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json /usr/local/share/vulkan/icd.d/*.json; do
        [ -f "$f" ] && return 0
    done
    return 1
}
have_loader() {
    local f
    for f in /usr/lib/*/libvulkan.so.1 /usr/lib64/libvulkan.so.1 /usr/lib/libvulkan.so.1 /usr/local/lib/libvulkan.so.1; do
        [ -e "$f" ] && return 0
    done
    PATH="$PATH:/sbin:/usr/sbin" ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'
}

if have_icd && have_loader; then
    say "Vulkan driver present: $(ls /usr/share/vulkan/icd.d/ /etc/vulkan/icd.d/ 2>/dev/null | grep json | tr '\n' ' ')"
elif [ "$(uname -s)" = Linux ]; then
    say "no Vulkan driver (ICD) or loader found: installing Mesa lavapipe (mesa-vulkan-drivers, libvulkan1)"
    if [ "$(id -u)" = 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null; then
        SUDO="sudo"
    else
        echo "error: installing lavapipe needs root or sudo; run as root, or install" >&2
        echo "       mesa-vulkan-drivers and libvulkan1 yourself" >&2
        exit 1
    fi
    if ! command -v apt-get >/dev/null; then
        echo "error: no apt-get: install Mesa's Vulkan drivers (lavapipe) and the Vulkan loader" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends mesa-vulkan-drivers libvulkan1
    have_icd || { echo "error: still no Vulkan ICD after installing mesa-vulkan-drivers" >&2; exit 1; }
else
    say "not Linux: using the platform's own GPU API (Metal / DX12)"
fi

# Vulkan on Linux wants a runtime dir; unset on CI runners and in containers.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

# --- Rust ----------------------------------------------------------------------------
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
    echo "error: cargo not found. Install Rust (1.89 or newer) with rustup:" >&2
    echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y" >&2
    echo "  . \"\$HOME/.cargo/env\"" >&2
    echo "then run this script again." >&2
    exit 1
fi
say "$(cargo --version), $(rustc --version 2>/dev/null || echo "rustc not on PATH")"

