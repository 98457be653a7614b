#!/usr/bin/env bash
# The test command of README.md: installs what the tests need (when it can), then runs every
# test of the workspace, with the HIP backend built (--features hip). GPU tests run on a real GPU when one is present, else on Mesa lavapipe
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
# The HIP backend's compilers (feature hip; MXMOE_TEST_HIP=0 tests without it): clang-19 + lld-19
# (PTX, gfx942), clang-22 + lld-22 (gfx950; Debian 12: bookworm-security), llvm-22 (llvm-objdump
# and llvm-readelf for the disassembly tests). A machine with ROCm may use its clang instead
# (build.rs; then set MXMOE_TEST_HIP_PKGS=0 to skip these packages).
hip_pkgs=(clang-19 lld-19 clang-22 lld-22 llvm-22)
if [ "${MXMOE_TEST_HIP:-1}" != 0 ] && [ "${MXMOE_TEST_HIP_PKGS:-1}" != 0 ] && command -v dpkg-query >/dev/null 2>&1; then
  for p in "${hip_pkgs[@]}"; do
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

# ptxas (CUDA 12.9) and nvdisasm, from NVIDIA's wheels on PyPI (no CUDA install, no GPU), for
# the tests that compile the sm_90a PTX to SASS: registers and spills of the matrix-core GEMMs,
# and the hot loops' instruction census (src/backend/hip/kernels/sass_tests.rs, scripts/sass_census.py).
# Kept under target/cuda-tools; MXMOE_TEST_PTXAS=0 skips them (they then report SKIPPED).
if [ "${MXMOE_TEST_HIP:-1}" != 0 ] && [ "${MXMOE_TEST_PTXAS:-1}" != 0 ] && [ -z "${MXMOE_PTXAS:-}" ]; then
  tools="$PWD/target/cuda-tools"
  if [ ! -x "$tools/ptxas" ] || [ ! -x "$tools/nvdisasm" ]; then
    echo "scripts/test.sh: fetching ptxas and nvdisasm (NVIDIA's PyPI wheels, ~45 MB)"
    mkdir -p "$tools/wheels"
    if python3 -m pip download -q --no-deps --disable-pip-version-check -d "$tools/wheels" \
         nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-nvdisasm==13.5.37; then
      python3 - "$tools" <<'PY'
import glob, os, sys, zipfile
tools = sys.argv[1]
for whl in glob.glob(os.path.join(tools, "wheels", "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.endswith(("/bin/ptxas", "/bin/nvdisasm")):
                dst = os.path.join(tools, os.path.basename(n))
                with z.open(n) as src, open(dst, "wb") as out:
                    out.write(src.read())
                os.chmod(dst, 0o755)
PY
      rm -rf "$tools/wheels"
    fi
  fi
  if [ -x "$tools/ptxas" ] && [ -x "$tools/nvdisasm" ]; then
    export MXMOE_PTXAS="$tools/ptxas" MXMOE_NVDISASM="$tools/nvdisasm"
    export MXMOE_REQUIRE_PTXAS="${MXMOE_REQUIRE_PTXAS:-1}"
  else
    echo "scripts/test.sh: could not fetch ptxas / nvdisasm; the SASS tests will report SKIPPED" >&2
  fi
fi

export MXMOE_REQUIRE_GPU="${MXMOE_REQUIRE_GPU:-1}"
# Prefer Vulkan (lavapipe or a real GPU) over GL for wgpu.
export WGPU_BACKEND="${WGPU_BACKEND:-vulkan}"
# CI builds once from a clean clone: incremental state would only take disk (1.4 GB) and time.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi
log="$(mktemp)"
set +e
features=()
if [ "${MXMOE_TEST_HIP:-1}" != 0 ]; then
  # Build the HIP kernels for gfx942, gfx950 and NVIDIA and test them (without a HIP-capable GPU
  # the backend's catalog cases are SKIPPED with the reason; MXMOE_REQUIRE_HIP=1 fails them).
  features=(--features mxmoe/hip)
fi
cargo test --workspace --no-fail-fast "${features[@]}" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e

# The Python package (python/): build its abi3 wheel with maturin (into target/, beside the
# core's build), install it into a virtualenv under target/pyenv, and run its pytest suite
# against the CLI binary the tests above built. MXMOE_SKIP_PYTHON=1 skips this step.
py_pass=0 py_fail=0 py_skip=0
if [ "${MXMOE_SKIP_PYTHON:-0}" != 1 ]; then
  t0=$SECONDS
  py_rc=0
  set +e
  (
    set -e
    venv=target/pyenv
    if [ ! -x "$venv/bin/python" ]; then
      if ! python3 -m venv "$venv" 2>/dev/null; then
        # Debian's python3 needs python3-venv for ensurepip.
        rm -rf "$venv"
        if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv
        python3 -m venv "$venv"
      fi
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check maturin numpy pytest ml_dtypes safetensors
    rm -f target/wheels/mxmoe-*.whl
    CARGO_TARGET_DIR="$PWD/target" "$venv/bin/maturin" build --release -m python/Cargo.toml --out target/wheels
    "$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps target/wheels/mxmoe-*.whl
  ) 2>&1 | tee -a "$log"
  py_rc=${PIPESTATUS[0]}
  if [ "$py_rc" = 0 ]; then
    MXMOE_BIN="${MXMOE_BIN:-$PWD/target/debug/mxmoe}" target/pyenv/bin/pytest python/tests -q \
      -p no:cacheprovider --junitxml=target/pytest.xml 2>&1 | tee -a "$log"
    py_rc=${PIPESTATUS[0]}
    read -r py_pass py_fail py_skip < <(target/pyenv/bin/python - <<'PY' 2>/dev/null || echo "0 1 0"
import xml.etree.ElementTree as ET
r = ET.parse("target/pytest.xml").getroot()
s = r if r.tag == "testsuite" else r.find("testsuite")
n, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
print(n - f - e - k, f + e, k)
PY
    )
  else
    echo "scripts/test.sh: building or installing the Python wheel failed" >&2
    py_fail=1
  fi
  set -e
  if [ "$py_rc" != 0 ] && [ "$py_fail" = 0 ]; then py_fail=1; fi
  echo "python: $py_pass passed, $py_fail failed, $py_skip skipped ($((SECONDS - t0)) s for wheel + pytest)"
  [ "$py_rc" = 0 ] || { [ "$rc" != 0 ] || rc=$py_rc; }
fi

# One closing line over every test binary and the pytest suite (cargo's own last line is the
# doc-tests').
awk -v pp="$py_pass" -v pf="$py_fail" -v ps="$py_skip" \
    '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "\ntotal: %d passed, %d failed, %d skipped\n", p + pp, f + pf, s + ps }' "$log"
rm -f "$log"
exit "$rc"
