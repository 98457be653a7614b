#!/usr/bin/env bash
# The HIP backend's conformance catalog on emulated GPUs, for a machine without them: builds
# hip/test/hip_emu.cpp (a CPU stand-in for libamdhip64.so that runs the kernels of hip/mxmoe.cu
# as an MI350 / MI300 would: 64-lane wavefronts, MFMA instructions emulated from AMD's documented
# layouts) and hip/test/cuda_emu.cpp (the same for the CUDA driver as an H200: mma.sync,
# ldmatrix, cp.async emulated from the PTX ISA) and runs `mxmoe check --backend hip` through
# them as gfx950, gfx942 and sm_90.
#   scripts/hip_emu.sh                 the quick suite on all three (about a minute with the build)
#   SUITE=full scripts/hip_emu.sh      the full suite (a few minutes)
#   ARCHS=gfx942 scripts/hip_emu.sh    one target; extra arguments go to `mxmoe check`
# Needs clang++ (C++20; clang-19 is what the HIP build uses) and the compilers of --features hip
# (scripts/test.sh installs them on Debian/Ubuntu). What it checks is our code against AMD's
# documents, not AMD hardware (docs/ARCHITECTURE.md, "HIP backend").
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=""
for c in clang++-19 clang++-20 clang++-21 clang++-22 clang++; do
  if command -v "$c" >/dev/null 2>&1; then cxx="$c"; break; fi
done
[ -n "$cxx" ] || { echo "scripts/hip_emu.sh: no clang++ found (apt-get install clang-19)" >&2; exit 1; }
mkdir -p target/hip_emu
amd="$PWD/target/hip_emu/libamdhip64_emu.so"
nv="$PWD/target/hip_emu/libcuda_emu.so"  # "cuda" in the name: driven through the CUDA driver API
echo "== building $amd and $nv with $cxx"
"$cxx" -std=c++20 -O1 -shared -fPIC -Wno-ignored-attributes -Wno-psabi -I hip hip/test/hip_emu.cpp -o "$amd"
"$cxx" -std=c++20 -O1 -shared -fPIC -Wno-ignored-attributes -Wno-psabi -I hip hip/test/cuda_emu.cpp -o "$nv"
echo "== building mxmoe (--features hip)"
cargo build --release --features hip --bin mxmoe
rc=0
for arch in ${ARCHS:-gfx950 gfx942 sm_90}; do
  echo "== $arch (emulated)"
  lib="$amd"
  [ "$arch" = sm_90 ] && lib="$nv"
  MXMOE_HIP_LIBRARY="$lib" MXMOE_HIP_EMU_ARCH="$arch" MXMOE_REQUIRE_HIP=1 \
    ./target/release/mxmoe check --backend hip --suite "${SUITE:-quick}" "$@" || rc=1
done
exit $rc
