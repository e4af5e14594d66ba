#!/usr/bin/env bash
# Installs the Debian 12 packages MoE Workbench needs to build, test and run (as root, or through sudo).
# Does nothing when everything is already installed, so it is cheap to call before every build.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache git python3
  libeigen3-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libsentencepiece-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev
  libfaiss-dev
  qt6-base-dev qt6-base-dev-tools qt6-charts-dev libqt6svg6-dev libqt6opengl6-dev libqt6openglwidgets6
  libgl-dev libgl1-mesa-dri libimgui-dev
  xvfb xauth clang libclang-rt-14-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "Installing: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
