#!/usr/bin/env bash
# Trains experiment runs side by side on a lent GPU machine until a deadline, then stages what a CPU machine needs to
# carry them on: a run's last.pt (and best.pt when its last validation was not its best), log.jsonl and cell.json.
# A lent machine hands back at most 8 files of at most 16 MiB per call, so checkpoints are cut into 15 MiB parts and
# staged in batches, runs/gpu_stage/<n>/, each under 60 MiB and 8 files. Batch 1 comes back with this command;
# fetch the others at once, before the machine goes back (it stays warm for about 30 s after a call), with
#   bash scripts/gpu_train_ahead.sh --fetch <n>
# Here, unpack with `tar xzf runs_state.tgz` (the command's logs are under gpu_logs/) and rebuild each checkpoint
# with `cat NAME.part* > NAME` in its run folder (the parts are named <run folder>__<checkpoint>.part<k>). A run that
# ends on the GPU machine translates and writes its record there as usual (runs_state.tgz holds the records and
# tables written there). Every training process logs the hardware it ran on, so the records of the runs carried on
# here name both machines.
#
# Usage, from the repository root, with the prepared data under runs/data (carried) and the run commands as
# arguments, each one `python -m mma_nmt experiment` command line:
#   MMA_NMT_GIT_COMMIT=<commit> DEADLINE=<s> bash scripts/gpu_train_ahead.sh "<experiment args>" ...
# DEADLINE: seconds after the start at which every training is stopped (default 500). REUSE_BUILD=1: a later call
# on the same warm machine uses the extension the first one built (the runs resume from their checkpoints).
# CUDA_TESTS=1 runs the CUDA suite (gpu_build.sh's gpu_cuda_tests, CUDA_TEST_WORKERS workers per dispatch mode) and
# BESIDE="<command>" one more command beside the training, their logs in runs_state.tgz's gpu_logs/; both are waited
# for until DEADLINE, then stopped with the training.
set -uo pipefail
: "${OUT:?OUT must name the folder whose files come back}"
stage=runs/gpu_stage
if [ "${1:-}" = "--fetch" ]; then
  cp "$stage/$2"/* "$OUT"/ && ls -la "$OUT"
  exit
fi
start=$SECONDS
deadline=${DEADLINE:-500}
start_marker=$(mktemp) && touch "$start_marker"  # records and tables written after it come back
mkdir -p "$OUT/logs"
say() { echo "[gpu $((SECONDS - start))s] $*" | tee -a "$OUT/logs/session.log"; }

say "machine: $(nvidia-smi -L 2>&1 | head -1); $(nproc) cores;" \
    "$(python3 -c 'import torch; print("torch", torch.__version__)')"
export PYTHONUNBUFFERED=1
# shellcheck source=scripts/gpu_build.sh
source scripts/gpu_build.sh
if ! gpu_build "$OUT/logs/build.log"; then
  say "build FAILED"; tail -40 "$OUT/logs/build.log"; exit 1
fi
say "built: $(python3 -c 'import mma_nmt; print(mma_nmt.build_info())' 2>&1 | tail -1)"

side_pids=()
if [ -n "${CUDA_TESTS:-}" ]; then
  gpu_cuda_tests "$OUT/logs" && side_pids+=("${cuda_test_pids[@]}")
  say "CUDA tests beside the training (pids ${cuda_test_pids[*]})"
fi
if [ -n "${BESIDE:-}" ]; then
  setsid bash -c "$BESIDE" > "$OUT/logs/beside.log" 2>&1 &
  side_pids+=($!)
  say "beside the training (pid $!): $BESIDE"
fi

pids=()
for args in "$@"; do
  log="$OUT/logs/train$((${#pids[@]} + 1)).log"
  # its own process group, so that stopping it stops whatever it started
  # shellcheck disable=SC2086  # each argument is a command line of several words
  setsid python3 -m mma_nmt experiment $args > "$log" 2>&1 &
  pids+=($!)
  say "$(basename "$log" .log) (pid $!): experiment $args"
done
while [ $((SECONDS - start)) -lt "$deadline" ]; do
  running=0
  for pid in "${pids[@]}" "${side_pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
  [ "$running" = 0 ] && break
  sleep 5
done
for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
sleep 3
for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null; done
# the side commands still running: the BESIDE one is a process group; the test subshells' pytest is their child
for pid in "${side_pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || { pkill -TERM -P "$pid"; kill "$pid"; } 2>/dev/null; done
[ -n "${CUDA_TESTS:-}" ] && say "CUDA tests: $(cuda_test_results "$OUT/logs")"
[ -n "${BESIDE:-}" ] && { say "beside the training:"; cat "$OUT/logs/beside.log"; }
say "trainings stopped: $(for log in "$OUT"/logs/train*.log; do tail -c 200 "$log" | tr '\r' '\n' | tail -1; done)"

# What each run reached, and its files to carry on, staged in batches.
say "staging (the logs so far go into runs_state.tgz)"
python3 scripts/gpu_stage_runs.py "$stage" "$start_marker" "$OUT/logs" 2>&1
rm -rf "$OUT/logs" && cp "$stage/1"/* "$OUT"/
