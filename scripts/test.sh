#!/usr/bin/env bash
# The test command of README.md: installs what the tests need (when it can), then runs every
# test of the workspace. GPU tests run on a real GPU when one is present, else on Mesa lavapipe
# (software Vulkan); with MXMOE_REQUIRE_GPU=1 (the default here) a missing adapter FAILS them
# instead of reporting SKIPPED.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
if command -v dpkg-query >/dev/null 2>&1; then
  # Vulkan loader + lavapipe (software Vulkan) for the wgpu tests; Xvfb + X/GL/xkb libraries
  # for the viewer's windowed smoke test.
  for p in libvulkan1 mesa-vulkan-drivers xvfb xauth libxkbcommon-x11-0 libxkbcommon0 libx11-6 \
           libxcursor1 libxrandr2 libxi6 libgl1 libegl1 libwayland-client0 fonts-dejavu-core; do
    have_pkg "$p" || need+=("$p")
  done
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "scripts/test.sh: installing ${need[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else SUDO="none"; fi
  if [ "$SUDO" = none ]; then
    echo "scripts/test.sh: cannot install packages (not root, no sudo); GPU/viewer tests may fail" >&2
  else
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
  fi
fi

export MXMOE_REQUIRE_GPU="${MXMOE_REQUIRE_GPU:-1}"
# Prefer Vulkan (lavapipe or a real GPU) over GL for wgpu.
export WGPU_BACKEND="${WGPU_BACKEND:-vulkan}"
log="$(mktemp)"
set +e
cargo test --workspace "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# One closing line over every test binary (cargo's own last line is the doc-tests').
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "\ntotal: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
rm -f "$log"
exit "$rc"
