// Sizes and options of one fused-attention call, validated once (attention_checks.cpp) and handed to a backend kernel.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/checks.h"
#include "common/tensors.h"
#include "common/key_lengths.h"

namespace mma_nmt::attention {

struct AttentionParams : AttentionSizes {
  std::vector<int64_t> head_kinds;  // one HeadKind per head
  int64_t window = 0;
  int64_t query_offset = 0;  // query row i sits at key position i + query_offset
  double scale = 1.0;
  double dropout_p = 0.0;
  uint64_t seed = 0;
  bool has_key_lengths = false;
  // The caller's word that the queries are the keys' own positions (T = S, no offset, checked): a query row at or past
  // its sentence's length is then padding, which a path may return as 0 with no gradient (SPEC, shared rules; only
  // the FlashAttention path does, flash_plan.h). Without it every row is computed, also where T = S by chance.
  bool self_attention = false;
};

// Checks q/k/v/key_lengths and the options; names the offending argument in the error. Returns the sizes. Leaving
// self_attention false is always correct (every query row computed); true only lets a path skip padding query rows.
AttentionParams check_attention_args(const char* op_name, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const std::optional<at::Tensor>& key_lengths, at::IntArrayRef head_kinds,
                                     int64_t window, double scale, int64_t query_offset, double dropout_p, int64_t seed,
                                     bool self_attention = false);

using ::mma_nmt::check_key_lengths;
using ::mma_nmt::check_same_layout;

}  // namespace mma_nmt::attention
