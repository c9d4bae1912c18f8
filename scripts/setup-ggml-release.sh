#!/usr/bin/env bash
# ggml's CPU backend of another release, side by side with the venv's (the libggml-python wheel
# 0.20.2, which stays installed): the wheel of the given libggml-python version is downloaded and
# its libraries unpacked into .backends/ggml-<wheel version>/ (ignored by git); nothing is installed.
# (libggml-python versions follow ggml's since 0.9; 0.3.5 holds ggml 0.0.1.)
#
#   scripts/setup-ggml-release.sh [LIBGGML_PYTHON_VERSION]     (default 0.17.0.post1: ggml 0.17.0)
#
# Idempotent. On success the last line on stdout is the folder to pass as --ggml-lib; everything
# else goes to stderr. Where the wheel cannot be had it prints one line "skip: <reason>" on stderr
# and exits 3.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL_VERSION="${1:-0.17.0.post1}"
GGML_VERSION="${WHEEL_VERSION%.post*}"
DEST=".backends/ggml-$GGML_VERSION"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"

skip() { echo "skip: $*" >&2; exit 3; }

if [ ! -f "$DEST/libggml-base.so" ] || [ ! -f "$DEST/libggml.so" ]; then
    "$PYTHON" -m pip --version >/dev/null 2>&1 || skip "no pip for $PYTHON to download libggml-python==$WHEEL_VERSION"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    echo "setup-ggml-release: pip download libggml-python==$WHEEL_VERSION" >&2
    # the libraries do not depend on the Python version: ask for the cp311 manylinux wheel whatever runs this
    "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
        --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 \
        "libggml-python==$WHEEL_VERSION" -d "$work" >/dev/null 2>&1 \
        || skip "pip could not download libggml-python==$WHEEL_VERSION"
    "$PYTHON" -m zipfile -e "$work"/*.whl "$work/unpacked"
    libs="$(dirname "$(find "$work/unpacked" -name libggml-base.so | head -1)")"
    [ -f "$libs/libggml-base.so" ] || skip "the libggml-python==$WHEEL_VERSION wheel has no libggml-base.so"
    rm -rf "$DEST.partial" && mkdir -p "$DEST.partial"
    cp "$libs"/libggml* "$DEST.partial"/
    # libraries auditwheel vendored (libgomp in older wheels): their RPATH includes $ORIGIN
    find "$work/unpacked" -path '*.libs/*.so*' -exec cp {} "$DEST.partial"/ \;
    rm -rf "$DEST" && mv "$DEST.partial" "$DEST"
fi

folder="$(cd "$DEST" && pwd)"
echo "setup-ggml-release: ready; use --ggml-lib $folder --device ggml:CPU" >&2
echo "$folder"
