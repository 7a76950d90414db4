# Sourced by the scripts that run on a lent GPU machine (gpu_session.sh, gpu_train_ahead.sh), from the repository root.
# gpu_cuda_tests DIR starts the CUDA suite in the background, once per dispatch mode (see below).
# gpu_build LOG: installs the pure-Python packages the image lacks, carried as wheels in .whl (sacremoses), and builds
# mma_nmt with its CUDA kernels for sm_90, its output in LOG (build.verbose: ninja prints every command, the link line
# too); the extension is put beside the package, which is imported from the repository (both go on PYTHONPATH).
# With REUSE_BUILD=1 a later call on the same warm machine keeps the extension an earlier one built. Returns non-zero
# when the build fails.
gpu_build() {
  local log=$1
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
  if [ -n "${REUSE_BUILD:-}" ] && ls mma_nmt/_C*.so > /dev/null 2>&1; then
    echo "reusing the extension built by an earlier call on this machine" >> "$log"
    return 0
  fi
  python3 -m pip install -v --no-build-isolation --no-deps --target /tmp/mma_build \
    -Cbuild-dir="${BUILD_DIR:-build/gpu}" -Cbuild.verbose=true \
    -Ccmake.define.MMA_NMT_CUDA=ON -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90 . > "$log" 2>&1 || return 1
  cp /tmp/mma_build/mma_nmt/_C*.so mma_nmt/
}

# gpu_cuda_tests DIR: starts the CUDA suite three times in the background, with the default dispatch, with
# MMA_NMT_CUDA_KERNELS=handwritten and with MMA_NMT_CUDA_KERNELS=composition (the compositions of PyTorch's kernels,
# which by default serve only long float32/float64 calls since 2026-12-02), into DIR/test_cuda.log,
# DIR/test_cuda_handwritten.log and DIR/test_cuda_composition.log (each ends with "exit <status>"); their PIDs are left
# in cuda_test_pids; cuda_test_results DIR gives their summary lines. The suite: the operators' CUDA cases, the
# attention kernels (with the opt-in FlashAttention-2 path, which its test turns on itself), every operator under CUDA
# autocast, the resume of a CUDA-trained run, a training step under torch.cuda.set_sync_debug_mode("error"), two runs
# under train.deterministic, every model family's step and searches under its mode, training under CUDA autocast, and
# the LSTM's decoder step replayed as CUDA graphs, in training and in search. The training tests prepare a
# tiny Multi30k subset from the raw corpus, which the lent machine lacks (../shared does not travel): copy
# ../shared/data/multi30k to runs/data/raw/ before the call (runs/data is carried); without it they error at setup, as
# in the session of 2026-11-28.
gpu_cuda_tests() {
  local dir=$1 workers=()
  [ -z "${MMA_NMT_DATA_DIR:-}" ] && [ -d runs/data/raw/multi30k ] && export MMA_NMT_DATA_DIR=$PWD/runs/data/raw
  # every test file with a test marked cuda (pytest collects only those files: quicker than -m cuda over the whole
  # suite); a list written out by hand left the LSTM step's graphs and the amp tests out of the leases until 2026-12-03
  local files
  mapfile -t files < <(grep -rlE --include='test_*.py' 'mark\.cuda|pytestmark.*cuda' tests/python | sort)
  local tests=(-q -p no:cacheprovider -o addopts="" -m cuda -rfE "${files[@]}")
  # With pytest-xdist the tests run in worker processes: a test that crashes its process is reported by name and the
  # others still run (a segmentation fault ended the first GPU run of the suite without its failure summary).
  python3 -c "import xdist" 2> /dev/null && workers=(-n "${CUDA_TEST_WORKERS:-3}")
  (MMA_NMT_REQUIRE_CUDA=1 python3 -m pytest "${workers[@]}" "${tests[@]}" > "$dir/test_cuda.log" 2>&1
   echo "exit $?" >> "$dir/test_cuda.log") &
  cuda_test_pids=($!)
  local mode
  for mode in handwritten composition; do
    (MMA_NMT_REQUIRE_CUDA=1 MMA_NMT_CUDA_KERNELS=$mode python3 -m pytest "${workers[@]}" "${tests[@]}" \
       > "$dir/test_cuda_$mode.log" 2>&1; echo "exit $?" >> "$dir/test_cuda_$mode.log") &
    cuda_test_pids+=($!)
  done
}

# cuda_test_results DIR: pytest's summary line of each run of gpu_cuda_tests (above the "exit" line it appends).
cuda_test_results() {
  local dir=$1 mode line
  line=$(tail -2 "$dir/test_cuda.log" | head -1)
  for mode in handwritten composition; do line+=" | $mode: $(tail -2 "$dir/test_cuda_$mode.log" | head -1)"; done
  echo "$line"
}
