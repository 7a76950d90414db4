#include "attention/attention_composition.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "attention/attention_outputs.h"
#include "attention/head_mask.h"
#include "attention/sdpa_choice.h"
#include "common/key_padding.h"

namespace mma_nmt::attention {
namespace {

// The visibility of a uniform head kind in the forms SDPA takes: nothing (every key), is_causal, or a boolean mask.
struct SdpaVisibility {
  // (B or 1, 1, T or 1, S) bool, true = visible (see empty_rows); passed as additive_bias (expanded: torch's SDPA
  // expands a user's (B, 1, 1, S) key padding mask over the queries so for its memory-efficient kernel)
  std::optional<at::Tensor> mask;
  bool is_causal = false;
  // (B or 1, 1, T or 1) bool, rows with no visible key, or undefined where there are none by construction. SDPA's
  // softmax over such a row is 0/0, so the mask shows those rows every key and the results are fixed afterwards: zero
  // output, lse -inf (forward); zero grad_out and lse +inf, which make every weight exp(s - inf) = 0 (backward).
  at::Tensor empty_rows;
};

// The rule of head_mask.h (visible_keys) as a (1, 1, T, S) boolean table, for the kinds composable() accepts but
// global heads (which see every key).
at::Tensor kind_rule(const AttentionParams& p, int64_t kind, const at::TensorOptions& options) {
  const at::Tensor position = at::arange(p.query_len, options).add_(p.query_offset).view({p.query_len, 1});  // (T, 1)
  const at::Tensor key = at::arange(p.key_len, options).view({1, p.key_len});                                // (1, S)
  const at::Tensor rule = kind == kForward ? key >= position : key <= position;  // F; B and C
  return rule.view({1, 1, p.query_len, p.key_len});
}

// `padding`: keys_past_sentence's (B, 1, 1, S) mask, undefined without key lengths; computed once by the caller, which
// also zeroes the padding keys with it. A global head's mask is (B, 1, 1, S), one row a sentence, which additive_bias
// expands over the queries (as over the heads); so are its empty rows, (B, 1, 1).
SdpaVisibility sdpa_visibility(const AttentionParams& p, const at::Tensor& q, const at::Tensor& padding) {
  const int64_t kind = p.head_kinds[0];
  const bool padded = padding.defined();
  if (!padded && kind == kGlobal) return {};
  if (!padded && (kind == kCausal || kind == kBackward) && p.query_len == p.key_len && p.query_offset == 0) {
    return {std::nullopt, true, at::Tensor()};  // SDPA's is_causal: key j <= query i, the flash kernels' fast path
  }
  at::Tensor visible;  // (B or 1, 1, T or 1, S)
  if (kind == kGlobal) {
    visible = padding.logical_not();
  } else {
    visible = kind_rule(p, kind, q.options().dtype(at::kLong));
    if (padded) visible = visible & padding.logical_not();
  }
  const at::Tensor empty = visible.any(-1, /*keepdim=*/true).logical_not_();  // (B or 1, 1, T or 1, 1)
  if (!padded) return {visible | empty, false, empty.squeeze(-1)};
  // A row without a visible key is shown its sentence's padding keys, which the callers zero (without_padding_keys),
  // so that no NaN of a real key hidden from the row reaches its weights (exp(NaN - inf) in the backward); every key
  // in a sentence without padding.
  const at::Tensor shown = padding | padding.any(-1, /*keepdim=*/true).logical_not();  // (B, 1, 1, S)
  return {visible | (empty & shown), false, empty.squeeze(-1)};
}

// SDPA's kernels take one head size for q, k and v: the narrower side is padded with zero columns, which change neither
// the logits (q . k) nor the output's first value_dim columns (weights times v's columns), and whose gradients are
// dropped. Multi-layer attention's joint weights need it (q and k n D wide against D for v).
int64_t common_head_dim(const AttentionParams& p) { return std::max(p.head_dim, p.value_dim); }

at::Tensor widened(const at::Tensor& x, int64_t dim) {
  return x.size(-1) == dim ? x : at::constant_pad_nd(x, {0, dim - x.size(-1)}, 0.0);
}

// A view: the operator's entry point lays results out as the operator returns them (as_position_major and
// as_gradient_layout, common/head_layout.h), one copy at most.
at::Tensor first_columns(const at::Tensor& x, int64_t dim) { return x.narrow(-1, 0, dim); }

// --- torch's fused kernels; the only device-specific code of this file ------------------------------------------
struct SdpaCall {
  const at::Tensor& q;
  const at::Tensor& k;
  const at::Tensor& v;
  const SdpaVisibility& visibility;
  double scale;
};

// Whether a CUDA call runs torch's memory-efficient kernel: torch's answer read through sdpa_choice.h.
bool efficient_kernel_serves(const SdpaCall& c) {
  const int64_t choice = at::_fused_sdp_choice(c.q, c.k, c.v, c.visibility.mask, 0.0, c.visibility.is_causal, c.scale);
  const bool half = c.q.scalar_type() == at::kHalf || c.q.scalar_type() == at::kBFloat16;
  return use_efficient_kernel(choice, SdpaForm{c.visibility.mask.has_value(), half, c.q.size(-1)});
}

// The fused kernels take the mask as an additive bias of q's dtype, 0 where visible and -inf elsewhere, expanded to
// (B, H, T, S): the memory-efficient kernel checks every size against q's (it accepts stride-0 broadcasting, not a size
// of 1: a (1, H, 1, S) bias for a decoder step without padding failed there with "attn_bias: wrong shape (batch
// dimension)"), while the CPU flash kernel would broadcast it, so only the CUDA suite can see that difference
// (tests/python/cuda_cases.py, the decoder-step cases). Its rows start 16-element aligned, as the memory-efficient
// kernel requires (S rounded up to 16, as torch's own SDPA pads it).
at::Tensor additive_bias(const SdpaCall& c) {
  const at::Tensor& mask = *c.visibility.mask;  // (B or 1, 1, T, S)
  const int64_t key_len = mask.size(3), padded_len = (key_len + 15) / 16 * 16;
  at::Tensor bias = at::empty({mask.size(0), 1, mask.size(2), padded_len}, c.q.options()).narrow(3, 0, key_len);
  bias.fill_(-std::numeric_limits<double>::infinity()).masked_fill_(mask, 0.0);
  return bias.expand({c.q.size(0), c.q.size(1), c.q.size(2), c.k.size(2)});  // (B, H, T, S)
}

// (out, lse (B, H, T)) of torch's fused forward, or nullopt where it has none for these inputs.
std::optional<std::pair<at::Tensor, at::Tensor>> fused_forward(const SdpaCall& c) {
  const bool causal = c.visibility.is_causal;
  const std::optional<at::Tensor> bias =
      c.visibility.mask.has_value() ? std::optional<at::Tensor>(additive_bias(c)) : std::nullopt;
  if (!c.q.is_cuda()) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(c.q, c.k, c.v, 0.0, causal, bias, c.scale);
    return std::make_pair(out, lse);
  }
  if (efficient_kernel_serves(c)) {
    const auto r = at::_scaled_dot_product_efficient_attention(c.q, c.k, c.v, bias, true, 0.0, causal, c.scale);
    return std::make_pair(std::get<0>(r), std::get<1>(r).narrow(2, 0, c.q.size(2)));  // lse is padded to 32 rows
  }
  return std::nullopt;
}

// (grad_q, grad_k, grad_v) of torch's fused backward from out and lse (B, H, T), or nullopt as fused_forward.
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> fused_backward(const SdpaCall& c,
                                                                             const at::Tensor& grad_out,
                                                                             const at::Tensor& out,
                                                                             const at::Tensor& lse) {
  const bool causal = c.visibility.is_causal;
  const at::Tensor bias = c.visibility.mask.has_value() ? additive_bias(c) : at::Tensor();
  if (!c.q.is_cuda()) {
    return at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, c.q, c.k, c.v, out, lse, 0.0, causal, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt,
        c.scale);
  }
  if (efficient_kernel_serves(c)) {
    const at::Tensor no_rng = at::empty({0}, c.q.options().dtype(at::kLong));  // philox state: unused without dropout
    const int64_t rows = c.q.size(2), padded_rows = (rows + 31) / 32 * 32;
    const at::Tensor padded_lse = at::constant_pad_nd(lse, {0, padded_rows - rows}, 0.0);  // its forward's layout
    auto [dq, dk, dv, dbias] = at::_scaled_dot_product_efficient_attention_backward(
        grad_out, c.q, c.k, c.v, bias, out, padded_lse, no_rng, no_rng, 0.0, {true, true, true, false}, causal,
        c.scale);
    return std::make_tuple(dq, dk, dv);
  }
  return std::nullopt;
}
// --- end of the device-specific code ------------------------------------------------------------------------------

// The heads of one kind, as runs of consecutive head indices [begin, begin + size).
struct HeadRun {
  int64_t begin, size;
};
struct HeadGroup {
  int64_t kind;
  std::vector<HeadRun> runs;
  int64_t heads = 0;
};

// Groups in order of each kind's first head.
std::vector<HeadGroup> heads_by_kind(const AttentionParams& p) {
  std::vector<HeadGroup> groups;
  for (int64_t h = 0; h < p.heads; ++h) {
    const int64_t kind = p.head_kinds[h];
    auto group = std::find_if(groups.begin(), groups.end(), [&](const HeadGroup& g) { return g.kind == kind; });
    if (group == groups.end()) group = groups.insert(groups.end(), HeadGroup{kind, {}});
    if (!group->runs.empty() && group->runs.back().begin + group->runs.back().size == h) {
      ++group->runs.back().size;
    } else {
      group->runs.push_back({h, 1});
    }
    ++group->heads;
  }
  return groups;
}

// x (B, H, ...) -> (B, group's heads, ...): a view for one run, the runs' concatenation otherwise. No index tensor, so
// nothing is copied from the host (safe under CUDA graph capture).
at::Tensor take_heads(const at::Tensor& x, const HeadGroup& g) {
  if (g.runs.size() == 1) return x.narrow(1, g.runs[0].begin, g.runs[0].size);
  std::vector<at::Tensor> pieces;
  for (const HeadRun& run : g.runs) pieces.push_back(x.narrow(1, run.begin, run.size));
  return at::cat(pieces, 1);
}

// The inverse of take_heads over every group at once: the groups' results (B, group's heads, ...), in the order of
// `groups`, joined into (B, H, ...) by one cat of their runs in head order (one kernel, where a copy per run launched
// one each). (B, H, L, D) results are joined as (B, L, H, D) views, so that the result comes out position-major (the
// operator's layout, common/head_layout.h); (B, H, T) ones (the lse) come out contiguous.
at::Tensor join_heads(const std::vector<HeadGroup>& groups, const std::vector<at::Tensor>& results) {
  std::vector<std::pair<int64_t, at::Tensor>> runs;  // (first head, the run's results)
  for (size_t i = 0; i < groups.size(); ++i) {
    int64_t taken = 0;
    for (const HeadRun& run : groups[i].runs) {
      runs.emplace_back(run.begin, results[i].narrow(1, taken, run.size));
      taken += run.size;
    }
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const bool rows = results.front().dim() == 4;
  std::vector<at::Tensor> pieces;
  for (const auto& [first, piece] : runs) pieces.push_back(rows ? piece.transpose(1, 2) : piece);  // (B, L, h, D)
  const at::Tensor joined = at::cat(pieces, rows ? 2 : 1);
  return rows ? joined.transpose(1, 2) : joined;  // (B, L, H, D) -> (B, H, L, D), position-major
}

AttentionParams group_params(const AttentionParams& p, const HeadGroup& g) {
  AttentionParams group = p;
  group.heads = g.heads;
  group.head_kinds.assign(g.heads, g.kind);
  return group;
}

}  // namespace

bool splittable(const AttentionParams& p, bool return_probs) {
  if (return_probs || p.dropout_p > 0.0 || p.head_kinds.empty()) return false;
  return p.head_dim != 0 && p.value_dim != 0 && p.query_len != 0 && p.key_len != 0 && p.batch != 0;
}

bool composable(const AttentionParams& p, bool return_probs) {
  if (!splittable(p, return_probs)) return false;
  for (const int64_t kind : p.head_kinds) {
    if (kind != p.head_kinds[0]) return false;
  }
  // A local head sees 2w + 1 keys: the hand-written kernel visits just those, SDPA would do T x S work.
  return p.head_kinds[0] != kLocal;
}

std::optional<AttentionTriple> attention_forward_by_sdpa(
    const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths) {
  const at::Tensor padding = padding_mask(key_lengths, p.key_len);
  const SdpaVisibility visibility = sdpa_visibility(p, q, padding);
  const int64_t dim = common_head_dim(p);
  const at::Tensor keys = without_padding_keys(k, padding), values = without_padding_keys(v, padding);
  const auto result = fused_forward({widened(q, dim), widened(keys, dim), widened(values, dim), visibility, p.scale});
  if (!result.has_value()) return std::nullopt;
  at::Tensor out = first_columns(result->first, p.value_dim);             // (B, H, T, Dv)
  at::Tensor lse = result->second.to(stats_dtype(q.scalar_type())).contiguous();  // (B, H, T)
  if (visibility.empty_rows.defined()) {
    out.masked_fill_(visibility.empty_rows.unsqueeze(-1), 0.0);
    lse.masked_fill_(visibility.empty_rows, -std::numeric_limits<double>::infinity());
  }
  return std::make_tuple(out, lse, at::empty({0}, q.options()));
}

std::optional<AttentionTriple> attention_backward_by_sdpa(
    const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths) {
  const at::Tensor padding = padding_mask(key_lengths, p.key_len);
  const SdpaVisibility visibility = sdpa_visibility(p, q, padding);
  at::Tensor grad = grad_out, row_lse = lse;
  if (visibility.empty_rows.defined()) {
    grad = grad_out.masked_fill(visibility.empty_rows.unsqueeze(-1), 0.0);
    row_lse = lse.masked_fill(visibility.empty_rows, std::numeric_limits<double>::infinity());
  }
  const int64_t dim = common_head_dim(p);
  const at::Tensor keys = without_padding_keys(k, padding), values = without_padding_keys(v, padding);
  const auto grads = fused_backward({widened(q, dim), widened(keys, dim), widened(values, dim), visibility, p.scale},
                                    widened(grad, dim), widened(out, dim), row_lse);
  if (!grads.has_value()) return std::nullopt;
  const auto& [grad_q, grad_k, grad_v] = *grads;
  return std::make_tuple(first_columns(grad_q, p.head_dim), first_columns(grad_k, p.head_dim),
                         first_columns(grad_v, p.value_dim));
}

namespace {

// The heads grouped by kind, each group through `run_group`, the results put back in head order.
template <typename RunGroup>
AttentionTriple forward_by_group(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const RunGroup& run_group) {
  const std::vector<HeadGroup> groups = heads_by_kind(p);
  if (groups.size() == 1) return run_group(p, q, k, v);
  std::vector<at::Tensor> outs, lses;
  for (const HeadGroup& g : groups) {
    const auto [group_out, group_lse, unused_probs] =
        run_group(group_params(p, g), take_heads(q, g), take_heads(k, g), take_heads(v, g));
    outs.push_back(group_out);
    lses.push_back(group_lse);
  }
  return std::make_tuple(join_heads(groups, outs), join_heads(groups, lses), at::empty({0}, q.options()));
}

template <typename RunGroup>
AttentionTriple backward_by_group(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                  const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                  const at::Tensor& lse, const RunGroup& run_group) {
  const std::vector<HeadGroup> groups = heads_by_kind(p);
  if (groups.size() == 1) return run_group(p, grad_out, q, k, v, out, lse);
  std::vector<at::Tensor> grad_q, grad_k, grad_v;
  for (const HeadGroup& g : groups) {
    const auto [gq, gk, gv] =
        run_group(group_params(p, g), take_heads(grad_out, g), take_heads(q, g), take_heads(k, g), take_heads(v, g),
                  take_heads(out, g), take_heads(lse, g));
    grad_q.push_back(gq);
    grad_k.push_back(gk);
    grad_v.push_back(gv);
  }
  // Position-major, as the CUDA entry lays every gradient out like its input (a copy only where the input is not).
  return std::make_tuple(join_heads(groups, grad_q), join_heads(groups, grad_k), join_heads(groups, grad_v));
}

}  // namespace

AttentionTriple attention_forward_per_kind(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                                           const AttentionKernels& kernels) {
  return forward_by_group(p, q, k, v, [&](const AttentionParams& gp, const at::Tensor& gq, const at::Tensor& gk,
                                          const at::Tensor& gv) { return kernels.forward(gp, gq, gk, gv, key_lengths); });
}

AttentionTriple attention_backward_per_kind(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                            const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
                                            const AttentionKernels& kernels) {
  return backward_by_group(p, grad_out, q, k, v, out, lse,
                           [&](const AttentionParams& gp, const at::Tensor& g_grad_out, const at::Tensor& gq,
                               const at::Tensor& gk, const at::Tensor& gv, const at::Tensor& g_out,
                               const at::Tensor& g_lse) {
                             return kernels.backward(gp, g_grad_out, gq, gk, gv, g_out, g_lse, key_lengths);
                           });
}

namespace {

// `kernels` behind SDPA: a group SDPA computes whole (composable, and torch has a fused kernel for it) goes there.
AttentionKernels sdpa_first(const AttentionKernels& kernels) {
  return {[&kernels](const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& key_lengths) -> AttentionTriple {
            if (composable(p, false)) {
              if (auto result = attention_forward_by_sdpa(p, q, k, v, key_lengths)) return *result;
            }
            return kernels.forward(p, q, k, v, key_lengths);
          },
          [&kernels](const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                     const std::optional<at::Tensor>& key_lengths) -> AttentionTriple {
            if (composable(p, false)) {
              if (auto grads = attention_backward_by_sdpa(p, grad_out, q, k, v, out, lse, key_lengths)) return *grads;
            }
            return kernels.backward(p, grad_out, q, k, v, out, lse, key_lengths);
          }};
}

}  // namespace

AttentionTriple attention_forward_by_kind(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                                          const AttentionKernels& kernels) {
  return attention_forward_per_kind(p, q, k, v, key_lengths, sdpa_first(kernels));
}

AttentionTriple attention_backward_by_kind(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                           const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                           const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
                                           const AttentionKernels& kernels) {
  auto grads = attention_backward_per_kind(p, grad_out, q, k, v, out, lse, key_lengths, sdpa_first(kernels));
  // A sentence with one key puts each row's whole weight on it (P = 1, O = v), so its query and key gradients are
  // exactly 0. A fused backward forms P (dP - delta) from dP = dO . v and delta = dO . O, two equal dot products
  // rounded differently, and sums that residue over every query into the key's gradient (1.55e-5 in float32 on the
  // H200, issue 48 point 6); the hand-written kernels and plain PyTorch give 0. The identity restores the exact value.
  auto& [grad_q, grad_k, grad_v] = grads;
  if (key_lengths.has_value()) {
    const at::Tensor one_key = key_lengths->eq(1).view({-1, 1, 1, 1});  // (B, 1, 1, 1)
    grad_q.masked_fill_(one_key, 0.0);
    grad_k.masked_fill_(one_key, 0.0);
  } else if (p.key_len == 1) {
    grad_q.zero_();
    grad_k.zero_();
  }
  return grads;
}

}  // namespace mma_nmt::attention
