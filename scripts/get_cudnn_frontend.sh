#!/usr/bin/env bash
# Puts the cuDNN frontend headers (cudnn_frontend.h and its folder: NVIDIA's header-only C++ graph API,
# a build dependency of src/kernels/cuda/attention_cudnn.cpp, never copied into the repository) in a
# git-ignored folder where CMake looks for them (cmake/megadlm_cudnn.cmake), and prints that folder.
#
#   scripts/get_cudnn_frontend.sh [DEST]     default DEST: build-gpu-deps/cudnn_frontend/include
#
# Sources, first that has them: DEST itself; $CUDNN_FRONTEND_INCLUDE; the include/ folder of an installed
# `nvidia-cudnn-frontend` pip package; else the wheel is downloaded from PyPI (version
# $CUDNN_FRONTEND_VERSION, default 1.32.0, the one the code was written against) and its include/ unpacked.
# Nothing is installed into Python. Exit status 1 when no source works (e.g. no network).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$ROOT/build-gpu-deps/cudnn_frontend/include}"
VERSION="${CUDNN_FRONTEND_VERSION:-1.32.0}"
PY="${PYTHON:-python3}"

if [[ -f "$DEST/cudnn_frontend.h" ]]; then echo "$DEST"; exit 0; fi
# The wheel's include/ holds cudnn_frontend.h, cudnn_frontend_*.h, cudnn_frontend/ and cudnn_backend_base.h.
copy_from() { mkdir -p "$DEST" && cp -r "$1"/cudnn_frontend* "$1"/cudnn_backend_base.h "$DEST"/; }

if [[ -n "${CUDNN_FRONTEND_INCLUDE:-}" && -f "$CUDNN_FRONTEND_INCLUDE/cudnn_frontend.h" ]]; then
  copy_from "$CUDNN_FRONTEND_INCLUDE"; echo "$DEST"; exit 0
fi
# An installed wheel puts include/ next to its `cudnn` package (find_spec: located, not imported).
site_inc=$("$PY" -c "import importlib.util, os
s = importlib.util.find_spec('cudnn')
print(os.path.join(os.path.dirname(list(s.submodule_search_locations)[0]), 'include') if s and s.submodule_search_locations else '')" 2>/dev/null || true)
if [[ -n "$site_inc" && -f "$site_inc/cudnn_frontend.h" ]]; then
  copy_from "$site_inc"; echo "$DEST"; exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get_cudnn_frontend.sh: downloading nvidia-cudnn-frontend==$VERSION from PyPI" >&2
"$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$VERSION" >&2 || {
  echo "get_cudnn_frontend.sh: pip download failed (no network?); set CUDNN_FRONTEND_INCLUDE" >&2; exit 1; }
"$PY" - "$tmp" "$DEST" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    for n in names:
        out = os.path.join(dest, n[len("include/"):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(n) as src, open(out, "wb") as dst:
            dst.write(src.read())
PY
[[ -f "$DEST/cudnn_frontend.h" ]] || { echo "get_cudnn_frontend.sh: the wheel had no include/cudnn_frontend.h" >&2; exit 1; }
echo "$DEST"
