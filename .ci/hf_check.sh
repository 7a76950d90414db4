#!/usr/bin/env bash
# The Hugging Face integration (mma_nmt.hf, docs/huggingface.md) under one 4.5x and one 5.x release of transformers:
# each is installed with its dependencies (accelerate for Seq2SeqTrainer) into its own prefix under build/, next to the
# project venv and without changing it, then tests/python/hf runs with that prefix on PYTHONPATH. The venv's torch and
# numpy are pinned by a constraints file, so pip never brings another torch.
#
# Usage: .ci/hf_check.sh [VENV_DIR]   (default ./.venv, as built by `make test`)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(realpath -m "${1:-./.venv}")"  # relative to the caller's directory
cd "$repo_root"
py="$venv/bin/python"
# Pinned, so that a new release cannot change CI unseen; move them on deliberately (one 4.5x, the newest 5.x).
versions=(4.57.6 5.24.0)
accelerate_version=1.15.0

started=$SECONDS
step() { echo "== [$((SECONDS - started))s] $*"; }

mkdir -p build
constraints="$repo_root/build/hf-constraints.txt"
"$py" -m pip freeze --disable-pip-version-check | grep -iE '^(torch|numpy)==' > "$constraints"
step "constraints from $venv: $(tr '\n' ' ' < "$constraints")"

for version in "${versions[@]}"; do
  prefix="$repo_root/build/hf-transformers-$version"
  rm -rf "$prefix"
  step "installing transformers $version and accelerate $accelerate_version into $prefix"
  "$py" -m pip install -q --disable-pip-version-check --prefix "$prefix" -c "$constraints" \
    "transformers==$version" "accelerate==$accelerate_version"
  site=$("$py" - "$prefix" <<'PY'
import sys, sysconfig
base = {"base": sys.argv[1], "platbase": sys.argv[1]}
print(":".join(dict.fromkeys(sysconfig.get_path(k, "posix_prefix", base) for k in ("purelib", "platlib"))))
PY
)
  if find "$prefix" -maxdepth 5 -type d -name torch | grep -q .; then
    echo "== pip installed another torch into $prefix; the constraints in $constraints did not hold" >&2
    exit 1
  fi
  # The tests skip without transformers or accelerate: check both are there, so a skip cannot pass for a run.
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$py" - "$version" "$prefix" <<'PY'
import sys
import accelerate, torch, transformers
assert transformers.__version__ == sys.argv[1], (transformers.__version__, sys.argv[1])
assert not torch.__file__.startswith(sys.argv[2]), f"torch from {torch.__file__}: pip installed another torch"
print(f"transformers {transformers.__version__}, accelerate {accelerate.__version__}, torch {torch.__version__}")
PY
  step "tests/python/hf under transformers $version"
  run_start=$SECONDS
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 "$py" -m pytest tests/python/hf -q -p no:cacheprovider
  step "transformers $version: tests took $((SECONDS - run_start)) s"
done
step "Hugging Face check done"
