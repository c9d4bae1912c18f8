#!/usr/bin/env bash
# A Vulkan device for the harness on a machine without a GPU: Debian's lavapipe (mesa-vulkan-drivers,
# a conformant Vulkan 1.3 implementation that runs compute shaders on the CPU) and ggml 0.25.1's
# prebuilt Vulkan libraries from the npm package @node-llama-cpp/linux-x64-vulkan, unpacked into
# .backends/ggml-0.25.1-vulkan/ (ignored by git), with the same release's libllama for `conform model`.
#
# `setup-vulkan.sh V` fetches node-llama-cpp V's package instead (an older ggml-vulkan and libllama, e.g.
# 3.15.1 = llama.cpp b7836) into .backends/vulkan-V/, for `conform bisect` (shared/reference/npm-ggml-releases.md).
#
# Idempotent. On success the last line on stdout is the folder to pass as --ggml-lib; everything
# else goes to stderr. Where something cannot be had it prints one line "skip: <reason>" on stderr
# and exits 3 (CI treats that as a skip, not a failure).
set -euo pipefail
cd "$(dirname "$0")/.."

NPM_PACKAGE="@node-llama-cpp/linux-x64-vulkan@3.22.1"  # ggml 0.25.1 (llama.cpp release v0.5.0 of node-llama-cpp)
DEST=".backends/ggml-0.25.1-vulkan"
if [ $# -gt 0 ]; then
    [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "setup-vulkan: $1 is not a node-llama-cpp version (3.15.1)" >&2; exit 2; }
    NPM_PACKAGE="@node-llama-cpp/linux-x64-vulkan@$1"
    DEST=".backends/vulkan-$1"
fi

skip() { echo "skip: $*" >&2; exit 3; }

[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] || skip "the npm libraries are built for Linux x86_64, this is $(uname -s)-$(uname -m)"

have_lavapipe() {
    ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '
}

if ! have_lavapipe; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        skip "no lavapipe here (Debian: apt-get install mesa-vulkan-drivers libvulkan1) and this is not root with apt-get"
    fi
    echo "setup-vulkan: installing mesa-vulkan-drivers (lavapipe) and libvulkan1" >&2
    apt_install() {
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends \
            mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1
    }
    apt_install || { apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 && apt_install; } \
        || skip "apt-get could not install mesa-vulkan-drivers libvulkan1"
    have_lavapipe || skip "mesa-vulkan-drivers is installed but no lavapipe ICD (lvp_icd) or libvulkan.so.1 is found"
fi

# a folder from before libllama was copied is refreshed once; a package without one leaves a marker
have_libllama() { ls "$DEST"/libllama.*.so >/dev/null 2>&1 || [ -f "$DEST/.no-libllama" ]; }

if [ ! -f "$DEST/libggml-base.so" ] || [ ! -f "$DEST/libggml-vulkan.so" ] || ! have_libllama; then
    command -v npm >/dev/null 2>&1 || skip "no npm to fetch $NPM_PACKAGE"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    echo "setup-vulkan: npm pack $NPM_PACKAGE" >&2
    (cd "$work" && npm pack --silent "$NPM_PACKAGE" >/dev/null 2>&1) || skip "npm pack $NPM_PACKAGE failed"
    tar -xzf "$work"/*.tgz -C "$work"
    bins="$work/package/bins/linux-x64-vulkan"
    [ -f "$bins/libggml-base.so" ] || skip "$NPM_PACKAGE has no bins/linux-x64-vulkan/libggml-base.so"
    rm -rf "$DEST.partial" && mkdir -p "$DEST.partial"
    # the ggml libraries and libllama (its RUNPATH is $ORIGIN, so it finds these ggml libraries); not the node addon
    cp "$bins"/libggml*.so "$DEST.partial"/
    # node-llama-cpp's build options, which name the llama.cpp build (device/build_tag.py reads it)
    cp "$bins"/_nlcBuildMetadata.json "$DEST.partial"/ 2>/dev/null || true
    cp "$bins"/libllama.*.so "$DEST.partial"/ 2>/dev/null \
        || { echo "setup-vulkan: $NPM_PACKAGE ships no libllama" >&2; touch "$DEST.partial/.no-libllama"; }
    rm -rf "$DEST" && mv "$DEST.partial" "$DEST"
fi

folder="$(cd "$DEST" && pwd)"
echo "setup-vulkan: ready; use --ggml-lib $folder --device ggml:Vulkan0" >&2
echo "$folder"
