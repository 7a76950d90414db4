#!/usr/bin/env bash
# One lease for issues 48 and 49 (a bare GPU image with CUDA, nvcc and a CUDA build of torch; no network): build
# mma_nmt with its CUDA kernels, probe the FlashAttention-2 path, run the CUDA suite in both dispatch modes (seconds),
# then measure, in priority order, attention and the decoder-side operators at NMT sizes (benchmarks/cuda_nmt_sizes.py:
# time, launches, host waits, peak memory, then CUDA-graph replay), the host path of an eager call (C++ against Python
# autograd: benchmarks/bench_registration_path.py), the LSTM decoder step eager against replay, whole
# training steps (python -m benchmarks --only training) and FlexAttention. Each step has its own time limit inside LIMIT (seconds, default 560) and writes to $OUT as it goes, so
# whatever a cut-off step measured comes back. The .whl folder, when carried, holds pure-Python wheels the image lacks.
#
#   OUT=... LIMIT=560 bash scripts/gpu_nmt_sizes.sh      (carry .whl and runs/data/raw)
# Before the call, here: pip download --no-deps -d .whl sacremoses sacrebleu portalocker tabulate colorama (the
# wheels) and cp -r ../shared/data/multi30k runs/data/raw/ (the raw corpus the resume and sync-free step tests need).
set -uo pipefail
start=$SECONDS
: "${OUT:?OUT must name the folder whose files come back}"
limit=${LIMIT:-560}
mkdir -p "$OUT/bench"
say() { echo "[gpu $((SECONDS - start))s] $*" | tee -a "$OUT/session.log"; }
until_s() { local s=$(($1 - (SECONDS - start))); [ "$s" -lt 5 ] && s=5; echo "$s"; }  # seconds left until t = $1

say "machine: $(nvidia-smi -L 2>&1 | head -1); $(nproc) cores; $(python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda)')"
# shellcheck source=scripts/gpu_build.sh
source scripts/gpu_build.sh
if ! gpu_build "$OUT/build.log"; then
  say "build FAILED"; tail -40 "$OUT/build.log" | tee -a "$OUT/session.log"; exit 1
fi
say "built: $(python3 -c 'import mma_nmt; print(mma_nmt.build_info())' 2>&1 | tail -1)"
python3 -c "import sacremoses, sacrebleu, sentencepiece, tqdm" 2>&1 | tail -1 | sed 's/^/[imports] /' >> "$OUT/session.log"

MMA_NMT_REQUIRE_CUDA=1 timeout "$(until_s 170)" python3 -m pytest -q -p no:cacheprovider -o addopts="" -m cuda -rfE \
  tests/python/ops/test_attention_cuda.py -k flash_opt_in > "$OUT/flash_probe.log" 2>&1
say "flash probe (flash_probe.log): $(tail -1 "$OUT/flash_probe.log")"

gpu_cuda_tests "$OUT"  # both dispatch modes, in the background; about 20 s on an H200
wait "${cuda_test_pids[@]}"
say "tests: $(cuda_test_results "$OUT")"

bench=(python3 -m benchmarks.cuda_nmt_sizes --out "$OUT/bench")
timeout "$(until_s 260)" "${bench[@]}" --only attention --only decoder --only long --deadline "$(until_s 245)" \
  >> "$OUT/bench/bench.log" 2>&1
say "nmt sizes bfloat16: exit $?, $(cat "$OUT/bench/nmt_sizes.jsonl" 2>/dev/null | wc -l) rows"
# The host path of an eager call: every operator's C++ autograd against its Python autograd.Function and the
# registered op, bfloat16, tiny and NMT size (wall clock, about 40 s).
timeout "$(until_s 305)" python3 -m benchmarks.bench_registration_path --device cuda --rounds 3 \
  > "$OUT/bench/registration_path.md" 2>&1
say "registration paths: exit $?"
# CUDA-graph capture in a process of its own: a failed capture can leave the CUDA context unusable.
timeout "$(until_s 340)" "${bench[@]}" --only decoder --graphs --deadline "$(until_s 330)" >> "$OUT/bench/bench.log" 2>&1
say "graphs (decoder): exit $?"
timeout "$(until_s 362)" python3 -m benchmarks.cuda_lstm_step --quick > "$OUT/bench/lstm_step.md" 2>&1
say "LSTM step: exit $?"
# OpenNMT-py's score form, whose query projection no longer copies W_sc per sentence (2026-12-02): the module's path
# if it is faster (issue 49 point 3)
timeout "$(until_s 376)" python3 -m benchmarks.cuda_lstm_step --quick --score-form projected_query \
  > "$OUT/bench/lstm_step_projected_query.md" 2>&1
say "LSTM step (projected query): exit $?"

# Whole training steps (issue 48: MMA and all-global vs the nn.MultiheadAttention model; issue 49: GMM and LSTM vs
# their reference models), float32 and autocast float16/bfloat16.
timeout "$(until_s 420)" python3 -m benchmarks --device cuda --quick --only training --out "$OUT/bench" \
  --name cuda-training > "$OUT/bench/training.log" 2>&1
say "training steps: exit $?"
say "CUDA-graph, LSTM and training steps done; FlexAttention"
timeout "$(until_s $((limit - 20)))" "${bench[@]}" --only flex --deadline "$(until_s $((limit - 40)))" >> "$OUT/bench/bench.log" 2>&1
say "flex: exit $?"
python3 -m benchmarks.cuda_nmt_sizes --out "$OUT/bench" --render 2>> "$OUT/session.log"
say "done"
