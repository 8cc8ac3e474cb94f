#!/usr/bin/env bash
# Installs what the build and the tests need on Debian 12, from Debian's packages only, and the
# further packages a script names as arguments (scripts/install_deps.sh fortunes gnuplot-nox).
# Idempotent: packages already present are left alone. Run as root (or with sudo available).
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config
      libdnnl-dev libomp-dev libopenmpi-dev openmpi-bin
      libgtest-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev zlib1g-dev libpng-dev libjpeg-dev "$@")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
