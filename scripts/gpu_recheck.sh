#!/usr/bin/env bash
# A short follow-up lease, for the rest of a session's device time after scripts/gpu_nmt_sizes.sh: build, the CUDA
# suite in both dispatch modes, then the NMT-size groups named in NMT_GROUPS (default: decoder attention), the training
# steps (python -m benchmarks --only training) and the LSTM decoder step, each step cut off in time so that the whole
# ends by LIMIT seconds (default 300). Everything lands in $OUT as in gpu_nmt_sizes.sh. COMPILED_STEPS="MODEL,..."
# (labels of benchmarks.cuda_training, e.g. "transformer_iwslt_small MMA") also times those training steps with both
# models compiled under reduce-overhead (CUDA graphs), in bfloat16: about a minute of compilation per model pair.
# SEARCH=1 also times the LSTM's beam search eager against decode.compile (benchmarks.cuda_search; about a minute).
# BATCH_SHAPES=DIR (a prepared data folder, carried: runs/data/multi30k_de_en_bpe2k is 11 MB) also trains a fresh model
# under reduce-overhead on DIR's first 100 batches at length_multiple 1 and 8 (benchmarks.cuda_batch_shapes).
# NMT_DTYPE (default bfloat16) is the NMT-size groups' dtype: float32 times the float32 defaults, which the
# full-scale recipes train in (train.amp is off unless set), against the compositions (MMA_NMT_CUDA_KERNELS=composition)
# that were those defaults until 2026-12-02, when the hand-written kernels took NMT sizes unmeasured.
#
#   OUT=... LIMIT=300 NMT_GROUPS="decoder attention" bash scripts/gpu_recheck.sh      (carry .whl and runs/data/raw)
set -uo pipefail
start=$SECONDS
: "${OUT:?OUT must name the folder whose files come back}"
limit=${LIMIT:-300}
mkdir -p "$OUT/bench"
say() { echo "[gpu $((SECONDS - start))s] $*" | tee -a "$OUT/session.log"; }
until_s() { local s=$(($1 - (SECONDS - start))); [ "$s" -lt 5 ] && s=5; echo "$s"; }  # seconds left until t = $1

say "machine: $(nvidia-smi -L 2>&1 | head -1); $(nproc) cores"
# shellcheck source=scripts/gpu_build.sh
source scripts/gpu_build.sh
if ! gpu_build "$OUT/build.log"; then
  say "build FAILED"; tail -40 "$OUT/build.log" | tee -a "$OUT/session.log"; exit 1
fi
say "built: $(python3 -c 'import mma_nmt; print(mma_nmt.build_info())' 2>&1 | tail -1)"

gpu_cuda_tests "$OUT"
wait "${cuda_test_pids[@]}"
say "tests: $(cuda_test_results "$OUT")"

groups=()
for group in ${NMT_GROUPS:-decoder attention}; do groups+=(--only "$group"); done
nmt_end=$((limit * 55 / 100))
timeout "$(until_s "$nmt_end")" python3 -m benchmarks.cuda_nmt_sizes --out "$OUT/bench" "${groups[@]}" \
  --dtype "${NMT_DTYPE:-bfloat16}" --deadline "$(until_s $((nmt_end - 15)))" >> "$OUT/bench/bench.log" 2>&1
say "nmt sizes (${NMT_GROUPS:-decoder attention}, ${NMT_DTYPE:-bfloat16}): exit $?," \
  "$(wc -l < "$OUT/bench/nmt_sizes.jsonl" 2>/dev/null) rows"
timeout "$(until_s $((limit - 20)))" python3 -m benchmarks --device cuda --quick --only training --out "$OUT/bench" \
  --name cuda-training > "$OUT/bench/training.log" 2>&1
say "training steps: exit $?"
if [ -n "${COMPILED_STEPS:-}" ]; then
  models=()
  IFS=',' read -ra labels <<< "$COMPILED_STEPS"
  for label in "${labels[@]}"; do models+=(--model "$label"); done
  timeout "$(until_s $((limit - 10)))" python3 -m benchmarks.cuda_training --quick --compile reduce-overhead \
    --precision "autocast bfloat16" "${models[@]}" > "$OUT/bench/training_compiled.md" 2>&1
  say "compiled training steps ($COMPILED_STEPS): exit $?"
fi
if [ -n "${SEARCH:-}" ]; then  # the LSTM's beam search, eager against decode.compile (reduce-overhead), bfloat16
  timeout "$(until_s $((limit - 30)))" python3 -m benchmarks.cuda_search --dtype bfloat16 \
    > "$OUT/bench/search.md" 2>&1
  say "search (decode.compile): exit $?"
fi
if [ -n "${BATCH_SHAPES:-}" ]; then  # what train.length_multiple saves under CUDA graphs (docs/cuda.md)
  timeout "$(until_s $((limit - 30)))" python3 -m benchmarks.cuda_batch_shapes "$BATCH_SHAPES" --steps 100 \
    > "$OUT/bench/batch_shapes.md" 2>&1
  say "batch shapes ($BATCH_SHAPES): exit $?"
fi
timeout "$(until_s "$limit")" python3 -m benchmarks.cuda_lstm_step --quick > "$OUT/bench/lstm_step.md" 2>&1
say "LSTM step: exit $?"
python3 -m benchmarks.cuda_nmt_sizes --out "$OUT/bench" --render 2>> "$OUT/session.log"
say "done"
