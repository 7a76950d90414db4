#!/usr/bin/env bash
# One short session on a lent GPU machine (a bare image with CUDA, nvcc and a CUDA build of torch; no network): build
# mma_nmt with its CUDA kernels for that torch, run the CUDA test suite (both dispatch modes) while mini runs of a table
# train side by side on the GPU, run an analysis of the trained models, then, if time is left, the quick CUDA
# benchmarks. What it measures lands in $OUT: session.log, build.log, the two test logs, results.tgz (run records,
# tables, analyses and run logs without checkpoints; unpack it in a scratch folder and copy what is new) and logs.tgz
# (training, progress, analysis and benchmark logs, the benchmark report).
#
# Usage, from the repository root (the prepared data of the runs must travel under runs/data):
#   MMA_NMT_GIT_COMMIT=<commit> DEADLINE=540 LIMIT=590 AFTER_TRAINING="<command>" \
#     bash scripts/gpu_session.sh "<experiment args>" ["<experiment args>" ...]
# Each argument is one `python -m mma_nmt experiment` command line; they start side by side, the first one with
# priority: when, 120 s into training, the slowest run would not end before DEADLINE (seconds after the start; the
# runs' update cap is MAX_STEPS, default 6000), the other commands are stopped to leave the GPU to the first. At
# DEADLINE every training command is stopped; LIMIT is the command's own time limit, before which the results are packed.
# BENCH_SECTIONS (default "operators training") names the quick CUDA benchmark sections run if time is left.
set -uo pipefail
start=$SECONDS
: "${OUT:?OUT must name the folder whose files come back}"
deadline=${DEADLINE:-540}
mkdir -p "$OUT/logs"
say() { echo "[gpu $((SECONDS - start))s] $*" | tee -a "$OUT/session.log"; }

say "machine: $(nvidia-smi -L 2>&1 | head -1); $(nproc) cores; $(python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')"
say "building mma_nmt with its CUDA kernels (sm_90)"
# shellcheck source=scripts/gpu_build.sh
source scripts/gpu_build.sh
if ! gpu_build "$OUT/build.log"; then
  say "build FAILED (build.log)"; exit 1
fi
# The toolchain and what the library links and defines: on the first H200 an error message formatting an integer
# crashed inside the library, in libstdc++ code that seemed to be defined there
# (benchmarks/results/2026-11-26.cuda-quick.notes.md).
# The session of 2026-11-26 (third) confirmed it: built with /opt/gcc/bin/g++ the library does not need
# libstdc++.so.6 and defines 4,637 std:: symbols, so libstdc++ was linked statically. Which of the compiler's
# libraries the linker finds, its link-time defaults and the flags in the environment say why; the build now links the
# shared libstdc++ explicitly (cmake/shared_libstdcxx.cmake), which the linkage tests check.
link_line=$(grep -m1 -e '-o _C\.cpython' "$OUT/build.log" | head -c 4000)
{ echo "== toolchain"; c++ --version | head -1; nvcc --version | tail -1; command -v c++ g++
  echo "== libstdc++ the compiler links"; for lib in libstdc++.so libstdc++.a; do echo "$lib: $(g++ -print-file-name=$lib)"; done
  echo "== static in the compiler's specs"; g++ -dumpspecs | grep -n "static-libstdc\|static-libgcc" | head -5
  echo "== flags in the environment"; env | grep -E '^(LDFLAGS|CXXFLAGS|CFLAGS|CMAKE_[A-Z_]*FLAGS|CXX|CC)=' || echo "(none)"
  echo "== the link line"; echo "$link_line"
  echo "== NEEDED"; readelf -d mma_nmt/_C*.so | grep NEEDED
  echo "== std:: definitions exported by the library"; nm -DC --defined-only mma_nmt/_C*.so | grep -c " std::"
  nm -DC --defined-only mma_nmt/_C*.so | grep " std::" | head -20
  echo "== linkage tests (cmake/shared_libstdcxx.cmake)"
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q -p no:cacheprovider -o addopts="" \
    tests/python/packaging/test_extension_linkage.py; } >> "$OUT/build.log" 2>&1
say "built: $(python3 -c 'import mma_nmt; print(mma_nmt.build_info())' 2>&1 | tail -1)"
# Issue 48's first-minute probe: does this torch's FlashAttention-2 take local windows (a build with
# FLASHATTENTION_DISABLE_LOCAL refuses them), and does MMA_NMT_CUDA_KERNELS=flash match the reference for every kind?
MMA_NMT_REQUIRE_CUDA=1 timeout 120 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m cuda -rfE \
  tests/python/ops/test_attention_cuda.py -k flash_opt_in > "$OUT/flash_probe.log" 2>&1
say "flash probe (flash_probe.log): $(tail -1 "$OUT/flash_probe.log")"

pids=()
for args in "$@"; do
  log="$OUT/logs/train$((${#pids[@]} + 1)).log"
  # shellcheck disable=SC2086  # each argument is a command line of several words
  (exec python3 -m mma_nmt experiment $args > "$log" 2>&1) &
  pids+=($!)
  say "$(basename "$log" .log) (pid $!): experiment $args"
done
train_start=$SECONDS

say "CUDA tests (default dispatch, MMA_NMT_CUDA_KERNELS=handwritten and =composition) beside the training"
gpu_cuda_tests "$OUT"

# Progress every 15 s: the newest update of every run (its log.jsonl).
steps_of() {
  local log
  for log in runs/experiments/*/*/*/log.jsonl; do
    [ -f "$log" ] && echo "$(basename "$(dirname "$log")") $(grep -o '"step": [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')"
  done
}
checked=0
while :; do
  running=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
  [ "$running" = 0 ] && break
  if [ $((SECONDS - start)) -ge "$deadline" ]; then say "deadline: stopping the training commands"; break; fi
  sleep 15
  { echo "== $((SECONDS - start))s"; steps_of; } >> "$OUT/logs/progress.log"
  if [ "$checked" = 0 ] && [ $((SECONDS - train_start)) -ge 120 ] && [ "${#pids[@]}" -gt 1 ]; then
    checked=1
    slowest=$(steps_of | awk 'NF == 2 {print $2}' | sort -n | head -1)
    elapsed=$((SECONDS - train_start))
    if [ -n "$slowest" ] && [ "$slowest" -gt 0 ]; then
      projected=$((train_start + elapsed * ${MAX_STEPS:-6000} / slowest + 60 - start))
      say "slowest run at update $slowest after ${elapsed}s of training: projected end ${projected}s (deadline ${deadline}s)"
      if [ "$projected" -gt "$deadline" ]; then
        for pid in "${pids[@]:1}"; do kill -TERM "$pid" 2>/dev/null; done
        say "stopped the other training commands to leave the GPU to the first"
      fi
    fi
  fi
done
for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
wait "${pids[@]}" 2>/dev/null
say "training commands ended: $(for log in "$OUT"/logs/train*.log; do tail -1 "$log"; done | tr '\n' ' ')"
wait "${cuda_test_pids[@]}" 2>/dev/null
say "tests: $(cuda_test_results "$OUT")"

# The results must be packed before the command's own limit (LIMIT seconds, default 590) cuts everything off.
limit=${LIMIT:-590}
left=$((limit - 15 - (SECONDS - start)))
if [ -n "${AFTER_TRAINING:-}" ] && [ "$left" -gt 20 ]; then
  say "after training, for at most ${left}s: $AFTER_TRAINING"
  timeout "$left" bash -c "$AFTER_TRAINING" > "$OUT/logs/after_training.log" 2>&1
  say "after training: exit $?"
fi
tar czf "$OUT/results.tgz" --exclude='*.pt' experiments/*/results runs/experiments 2>> "$OUT/session.log"
say "results packed ($(du -h "$OUT/results.tgz" | cut -f1))"

left=$((limit - 10 - (SECONDS - start)))
if [ "$left" -gt 60 ]; then
  sections=${BENCH_SECTIONS:-operators training}  # the quick CUDA suite's sections to run, in order
  say "quick CUDA benchmarks ($sections) for at most ${left}s"
  # shellcheck disable=SC2046  # one --only per section
  timeout "$left" python3 -m benchmarks --device cuda --quick $(printf -- '--only %s ' $sections) --out "$OUT/logs" \
    --name cuda-quick > "$OUT/logs/bench.log" 2>&1
  say "benchmarks: exit $?"
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -r "$OUT/logs"
say "done"
