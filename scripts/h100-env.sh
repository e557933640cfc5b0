# Sourced by the H100 scripts (scripts/h100.sh, scripts/h100-sass.sh): the device machine's
# Vulkan loader (carried as .gl/*.deb, installed when missing), NVIDIA's ICD, the output folder
# and the wgconv binary.
OUT=${OUT:-/tmp/wgconv-h100}
mkdir -p "$OUT"
BIN=${WGCONV_BIN:-target/release/wgconv}
if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan.so.1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
