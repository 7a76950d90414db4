#!/usr/bin/env bash
# CI: mma_nmt as a real package. Builds the wheel (pip wheel --no-build-isolation, build tree build/wheel, reused
# between runs), installs it with torch into a fresh virtual environment, and runs `mma-nmt demo` briefly from a folder
# outside the checkout, so that everything a command reads at run time must ship in the wheel (issue 51, point 4).
#   usage: .ci/wheel_check.sh [BUILD_VENV]   (default .venv: the environment make test set up, with torch and the
#          build tools; MMA_NMT_TORCH names the torch of the fresh environment as for scripts/setup.sh)
# The corpora are read from ../shared/data (MMA_NMT_DATA_DIR overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
build_py="$(realpath "${1:-.venv}")/bin/python"
torch_spec="${MMA_NMT_TORCH:-torch==2.13.0}"
data="${MMA_NMT_DATA_DIR:-$(realpath -m ../shared/data)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
say() { echo "[wheel] $* ($(( SECONDS - start )) s)"; }

PATH="$(dirname "$build_py"):$PATH" "$build_py" -m pip wheel -q --disable-pip-version-check --no-build-isolation \
  --no-deps -Cbuild-dir=build/wheel -w "$work/dist" .
wheel="$(ls "$work"/dist/mma_nmt-*.whl)"
say "built $(basename "$wheel")"

python3 -m venv "$work/venv"
pip_quiet() { "$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$@"; }
# shellcheck disable=SC2086  # MMA_NMT_TORCH may carry pip options, as in scripts/setup.sh
pip_quiet $torch_spec
pip_quiet "$wheel"
say "installed it with $torch_spec in a fresh virtual environment"

mkdir "$work/elsewhere"
cd "$work/elsewhere"  # outside the checkout: nothing of the repository is reachable from here
"$work/venv/bin/python" -c "import mma_nmt, sys; assert '$repo' not in mma_nmt.__file__, mma_nmt.__file__; \
print('[wheel] mma_nmt from', mma_nmt.__file__, mma_nmt.build_info())"
# A short demo: a small slice of Multi30k, a few seconds of training, greedy decoding of the test split.
MMA_NMT_DATA_DIR="$data" "$work/venv/bin/mma-nmt" demo --minutes 0.1 --set data.max_train_lines=3000 \
  --set data.vocab_size=500 --set decode.beam_size=1 --set eval.attention_maps=1
test -s runs/tiny_mma_multi30k/translations/test.scores.json
say "mma-nmt demo ran from $work/elsewhere"
