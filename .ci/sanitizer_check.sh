#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer check of the C++ extension, from scratch:
#   bash .ci/sanitizer_check.sh VENV_DIR [pytest args...]
# makes a fresh virtual environment at VENV_DIR, builds the extension with MMA_NMT_SANITIZE=ON (build dir build/asan),
# and runs the operator tests with the sanitizer runtimes preloaded into python. Any sanitizer report fails the run
# (UBSan halts on the first error; ASan always does). Extra arguments go to pytest (default: the operator tests).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: bash .ci/sanitizer_check.sh VENV_DIR [pytest args...]}
shift
start=$(date +%s)

echo "== fresh venv $venv"
rm -rf "$venv"
python3 -m venv "$venv"
. "$venv/bin/activate"
pip install -q --upgrade pip
pip install -q torch==2.13.0 numpy pytest hypothesis expecttest scikit-build-core pybind11 ninja cmake
echo "== venv ready in $(( $(date +%s) - start )) s"

echo "== ASan+UBSan build (build/asan)"
build_start=$(date +%s)
pip install -q --no-build-isolation -e . -C build-dir=build/asan -C cmake.build-type=RelWithDebInfo \
  -C cmake.define.MMA_NMT_SANITIZE=ON -C cmake.define.MMA_NMT_CUDA=OFF
echo "== build done in $(( $(date +%s) - build_start )) s"

# python itself is not instrumented, so the ASan runtime must be loaded first. CPython keeps objects alive until exit by
# design: leak detection is off. The C++ sanitizer runtimes are those of the compiler that built the extension.
cxx=${CXX:-c++}
asan_lib=$("$cxx" -print-file-name=libasan.so)
ubsan_lib=$("$cxx" -print-file-name=libubsan.so)
for lib in "$asan_lib" "$ubsan_lib"; do
  [ -f "$lib" ] || { echo "sanitizer runtime not found: $lib" >&2; exit 1; }
done
export LD_PRELOAD="$asan_lib $ubsan_lib"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_init_order=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

if [ $# -eq 0 ]; then
  set -- tests/python/ops/test_attention_errors.py tests/python/ops/test_attention_op.py \
    tests/python/modules/test_mixed_multihead_attention_module.py \
    tests/python/ops/test_properties_*.py
fi
echo "== operator tests under ASan+UBSan"
test_start=$(date +%s)
python -c "import mma_nmt; print('mma_nmt build:', mma_nmt.build_info())"
python -m pytest -p no:cacheprovider "$@"
echo "== tests done in $(( $(date +%s) - test_start )) s"
echo "== sanitizer check passed in $(( $(date +%s) - start )) s"
