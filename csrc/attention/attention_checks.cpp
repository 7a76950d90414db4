#include "attention/attention_params.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>

#include "attention/head_mask.h"

namespace mma_nmt::attention {
namespace {

constexpr int64_t kMaxQueryOffset = int64_t(1) << 60;  // keeps i + query_offset + window + 1 inside int64

}  // namespace

AttentionParams check_attention_args(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const std::optional<at::Tensor>& key_lengths, at::IntArrayRef head_kinds,
                                     int64_t window, double scale, int64_t query_offset, double dropout_p, int64_t seed,
                                     bool self_attention) {
  AttentionParams p;
  static_cast<AttentionSizes&>(p) = check_query_key_value(op, q, k, v, ValueLayout::kPerHead);
  TORCH_CHECK_VALUE(static_cast<int64_t>(head_kinds.size()) == p.heads, op, ": head_kinds must give one kind per head (",
                    p.heads, "), got ", head_kinds.size());
  for (const int64_t kind : head_kinds) {
    TORCH_CHECK_VALUE(kind >= 0 && kind < kNumHeadKinds, op, ": head_kinds entries must be in [0, ", kNumHeadKinds,
                      ") (0=G global, 1=L local, 2=F forward, 3=B backward, 4=C causal), got ", kind);
  }
  TORCH_CHECK_VALUE(window >= 0, op, ": window must be >= 0, got ", window);
  TORCH_CHECK_VALUE(query_offset >= -kMaxQueryOffset && query_offset <= kMaxQueryOffset, op,
                    ": query_offset must lie in [-2^60, 2^60], got ", query_offset);
  TORCH_CHECK_VALUE(scale > 0.0 && std::isfinite(scale), op, ": scale must be positive and finite, got ", scale);
  TORCH_CHECK_VALUE(dropout_p >= 0.0 && dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ", dropout_p);
  if (key_lengths.has_value()) {
    check_key_lengths(op, *key_lengths, q, p.key_len);
  }
  TORCH_CHECK_VALUE(!self_attention || (p.query_len == p.key_len && query_offset == 0), op,
                    ": self_attention=True says the queries are the keys' own positions, which needs query_len == "
                    "key_len and query_offset == 0; got query_len ", p.query_len, ", key_len ", p.key_len,
                    ", query_offset ", query_offset);
  p.head_kinds.assign(head_kinds.begin(), head_kinds.end());
  // A window wider than every query-key distance sees the same keys as any wider one; clamping it keeps the kernels'
  // position arithmetic (query_pos + window + 1) far from int64 overflow.
  p.window = std::min(window, std::abs(query_offset) + p.query_len + p.key_len);
  p.query_offset = query_offset;
  p.scale = scale;
  p.dropout_p = dropout_p;
  p.seed = static_cast<uint64_t>(seed);
  p.has_key_lengths = key_lengths.has_value();
  p.self_attention = self_attention;
  return p;
}

}  // namespace mma_nmt::attention
