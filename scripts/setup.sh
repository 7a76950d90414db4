#!/usr/bin/env bash
# Sets up the virtual environment that `make demo` and `make test` run in, on first use; later calls only check.
#   1. the venv ($VENV, default .venv);
#   2. torch: the one already in the venv is kept (a CUDA build stays a CUDA build), else $MMA_NMT_TORCH is installed
#      (default torch==2.13.0);
#   3. the build tools, then mma_nmt in editable mode with its dependencies (build tree build/dev, reused);
#   4. with --tests: the test extra, GoogleTest (see below) and the C++ test suite (ctest --test-dir build/dev).
# The package is rebuilt (incrementally) when pyproject.toml, CMakeLists.txt, cmake/ or csrc/ changed since the last
# install. GoogleTest: an installed one (Debian's libgtest-dev, conda, ...) is used; when none is found and this runs as
# root with apt, libgtest-dev is installed; without root, Debian's `googletest` source package is fetched with
# `apt-get download` into build/deps; where none of that works CMake downloads the release (cmake/googletest.cmake).
#
# Usage: scripts/setup.sh [--tests]
set -euo pipefail

tests=0
case "${1:-}" in
  --tests) tests=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
venv="$(realpath -m "${VENV:-.venv}")"  # relative to the repository root
torch_spec="${MMA_NMT_TORCH:-torch==2.13.0}"
stamp="$venv/.mma_nmt-installed$([ "$tests" = 1 ] && echo -tests || true)"
started=$SECONDS
say() { echo "[setup] $*"; }

# Done already, and no build input changed since: nothing to do (this is the path of every call after the first).
if [ -f "$stamp" ] && [ -z "$(find pyproject.toml CMakeLists.txt cmake csrc -newer "$stamp" -print -quit)" ]; then
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  say "creating the virtual environment $venv"
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
export PATH="$venv/bin:$PATH"  # the venv's cmake, ninja and ctest
pip_quiet() { "$py" -m pip install -q --disable-pip-version-check "$@"; }

if "$py" -c "import torch" 2>/dev/null; then
  say "keeping $("$py" -c 'import torch; print("torch", torch.__version__, "(CUDA " + (torch.version.cuda or "none") + ")")')"
else
  say "installing $torch_spec (a few minutes on a slow connection)"
  # shellcheck disable=SC2086  # MMA_NMT_TORCH may carry pip options, e.g. "torch==2.13.0 --index-url URL"
  pip_quiet $torch_spec
fi
pip_quiet scikit-build-core pybind11 ninja cmake numpy

gtest_installed() {
  local prefix
  for prefix in "${GTest_ROOT:-}" /usr /usr/local "${CONDA_PREFIX:-}"; do
    [ -n "$prefix" ] && [ -f "$prefix/include/gtest/gtest.h" ] && return 0
  done
  return 1
}

build_args=()
if [ "$tests" = 1 ]; then
  build_args+=(-Ccmake.define.MMA_NMT_BUILD_TESTS=ON)
  # MMA_NMT_EMULATED_TESTS=ON (CI) makes the emulated CUDA kernel tests mandatory; MMA_NMT_HIP_CPU_DIR names the runtime
  [ -n "${MMA_NMT_EMULATED_TESTS:-}" ] && build_args+=("-Ccmake.define.MMA_NMT_EMULATED_TESTS=$MMA_NMT_EMULATED_TESTS")
  [ -n "${MMA_NMT_HIP_CPU_DIR:-}" ] && build_args+=("-Ccmake.define.MMA_NMT_HIP_CPU_DIR=$MMA_NMT_HIP_CPU_DIR")
  if gtest_installed; then
    :
  elif [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    say "installing GoogleTest (Debian package libgtest-dev)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgtest-dev > /dev/null; } ||
      say "apt-get could not install libgtest-dev; CMake will download GoogleTest"
  elif command -v apt-get > /dev/null && command -v dpkg-deb > /dev/null; then
    deps="$repo/build/deps"
    if [ ! -f "$deps/googletest/usr/src/googletest/CMakeLists.txt" ]; then
      say "fetching GoogleTest's source (Debian package googletest) into $deps"
      mkdir -p "$deps/googletest"
      if (cd "$deps" && apt-get download -qq googletest > /dev/null 2>&1); then
        dpkg-deb -x "$deps"/googletest_*.deb "$deps/googletest"
      fi
    fi
    if [ -f "$deps/googletest/usr/src/googletest/CMakeLists.txt" ]; then
      build_args+=("-Ccmake.define.FETCHCONTENT_SOURCE_DIR_GOOGLETEST=$deps/googletest/usr/src/googletest")
    fi
  fi
fi

# ccache, when it is installed, caches the compiles (a rebuild from a fresh build folder or clone takes the objects it
# already made); CMake reads the launcher from the environment when it first configures build/dev. A launcher the
# caller set is kept. Not installed here: `apt-get install ccache` (CI does, .ci/run).
if command -v ccache > /dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER="${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"
fi

extras=""
[ "$tests" = 1 ] && extras="[test]"
say "building and installing mma_nmt$extras (build/dev; 5-15 minutes the first time on 2 cores)"
pip_quiet --no-build-isolation -e ".$extras" -Cbuild-dir=build/dev "${build_args[@]}"
"$py" -c "import mma_nmt; print('[setup] mma_nmt', mma_nmt.__version__, mma_nmt.build_info())"
touch "$venv/.mma_nmt-installed"
[ "$tests" = 1 ] && touch "$stamp"
say "done in $((SECONDS - started)) s"
