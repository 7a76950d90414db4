#!/usr/bin/env bash
# Proves that the CUDA kernels compile and link against a CUDA build of torch, on a machine without a GPU:
#   1. a fresh venv with torch 2.14.1 (CUDA 13) and the build tools,
#   2. the package built and installed with MMA_NMT_CUDA=ON (build tree in build/cuda, reused by later runs),
#   3. a Python check that the extension was built with CUDA and registered CUDA kernels for every operator.
# Needs nvcc (CUDA 13) at /usr/local/cuda or named by CUDACXX. Kernels cannot run here; see the report at the end.
#
# Usage: .ci/cuda_build_check.sh [VENV_DIR]   (default ./.venv-cuda)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(realpath -m "${1:-./.venv-cuda}")"  # relative to the caller's directory
cd "$repo_root"

started=$SECONDS
step() { echo "== [$((SECONDS - started))s] $*"; }

step "creating venv at $venv"
python3 -m venv "$venv"
export PATH="$venv/bin:$PATH"  # the venv's cmake and ninja for the build

step "installing torch 2.14.1 and the build tools"
python -m pip install --quiet torch==2.14.1 numpy scikit-build-core pybind11 ninja cmake
python -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'

# --no-deps: importing mma_nmt needs only torch; the model and data dependencies are not what this check is about.
step "building mma_nmt with MMA_NMT_CUDA=ON"
# One architecture proves that the sources compile and link; users build for theirs (default 80;90).
archs="${MMA_NMT_CI_CUDA_ARCHITECTURES:-80}"
python -m pip install --no-build-isolation --no-deps -C cmake.define.MMA_NMT_CUDA=ON \
  -C "cmake.define.CMAKE_CUDA_ARCHITECTURES=$archs" -C build-dir=build/cuda .

step "checking the installed extension"
# Run outside the source tree so that the installed package, not ./mma_nmt, is imported.
(cd "$venv" && python - <<'EOF'
import torch

import mma_nmt

info = mma_nmt.build_info()
print("mma_nmt.build_info():", info)
assert info["cuda"] is True, "mma_nmt was built without its CUDA kernels"
ops = sorted(name for name in torch._C._dispatch_get_all_op_names() if name.startswith("mma_nmt::"))
assert ops, "no mma_nmt operator is registered"
for op in ops:
    has_cuda = torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA")
    print(f"{op}: CUDA kernel registered = {has_cuda}")
    assert has_cuda, f"{op} has no CUDA kernel"
print("torch.cuda.is_available():", torch.cuda.is_available(), "(kernels are compiled, not run, without a GPU)")
EOF
)
step "done: CUDA build check passed"
