#!/usr/bin/env bash
# The README's test command: installs the build dependencies (Debian 12), builds in Release and runs
# the whole GoogleTest suite through ctest. Uses every core; finishes in a few minutes on two.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --parallel
ctest --test-dir build --output-on-failure --timeout 600 -j "$(nproc)"
