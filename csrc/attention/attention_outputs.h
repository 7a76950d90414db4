// Output allocation shared by the CPU and CUDA implementations (and mirrored by the fake kernel in Python).
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "attention/attention_params.h"
#include "common/head_layout.h"
#include "common/tensors.h"

namespace mma_nmt::attention {

struct ForwardOutputs {
  at::Tensor out;    // (B, H, T, Dv), contiguous or position-major (OutLayout)
  at::Tensor lse;    // (B, H, T)
  at::Tensor probs;  // (B, H, T, S) when asked for, else an empty (0,) tensor
};

// How a backend stores `out`: the CPU kernels write it position-major, (B, T, H, Dv) in memory, so that merging the
// heads is a view (common/head_layout.h); the CUDA ones contiguous.
enum class OutLayout { kContiguous, kPositionMajor };

inline ForwardOutputs allocate_forward_outputs(const AttentionParams& p, const at::Tensor& q, bool return_probs,
                                               OutLayout layout = OutLayout::kContiguous) {
  ForwardOutputs o;
  o.out = layout == OutLayout::kPositionMajor
              ? position_major(p.batch, p.heads, p.query_len, p.value_dim, q.options())
              : at::empty({p.batch, p.heads, p.query_len, p.value_dim}, q.options());
  o.lse = at::empty({p.batch, p.heads, p.query_len}, q.options().dtype(stats_dtype(q.scalar_type())));
  o.probs = return_probs ? at::zeros({p.batch, p.heads, p.query_len, p.key_len}, q.options())
                         : at::empty({0}, q.options());
  return o;
}

}  // namespace mma_nmt::attention
