#!/usr/bin/env bash
# The README's test command: installs the build dependencies (Debian 12), builds in Release and runs
# the whole GoogleTest suite through ctest. Uses every core; finishes in a few minutes on two.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
# ccache, when installed, makes a rebuild after a small change take seconds (CI installs it).
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"
cmake --build build --parallel
ctest --test-dir build --output-on-failure --timeout 600 -j "$(nproc)"
