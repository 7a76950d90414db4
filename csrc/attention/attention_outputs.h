// Output allocation shared by the CPU and CUDA implementations (and mirrored by the fake kernel in Python).
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "attention/attention_params.h"
#include "common/tensors.h"

namespace mma_nmt::attention {

struct ForwardOutputs {
  at::Tensor out;    // (B, H, T, Dv)
  at::Tensor lse;    // (B, H, T)
  at::Tensor probs;  // (B, H, T, S) when asked for, else an empty (0,) tensor
};

inline ForwardOutputs allocate_forward_outputs(const AttentionParams& p, const at::Tensor& q, bool return_probs) {
  ForwardOutputs o;
  o.out = at::empty({p.batch, p.heads, p.query_len, p.value_dim}, q.options());
  o.lse = at::empty({p.batch, p.heads, p.query_len}, q.options().dtype(stats_dtype(q.scalar_type())));
  o.probs = return_probs ? at::zeros({p.batch, p.heads, p.query_len, p.key_len}, q.options())
                         : at::empty({0}, q.options());
  return o;
}

}  // namespace mma_nmt::attention
