// The eager fast path's C++ autograd, one function per operator that has one (mma_nmt/ops/registration.py calls them
// through mma_nmt._C for eager calls that need gradients; torch.compile, torch.func, opcheck and direct calls of
// torch.ops.mma_nmt.* keep the registered Python autograd). Each takes the schema's arguments, all of them, in order,
// and returns the schema's outputs; each runs the same kernels on the same arguments as the registered autograd, so
// results are bit-identical.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

namespace mma_nmt::eager {

using OutLse = std::tuple<at::Tensor, at::Tensor, at::Tensor>;  // (out, lse, probs)

OutLse attention_with_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::optional<at::Tensor>& key_lengths, std::vector<int64_t> head_kinds,
                               int64_t window, double scale, int64_t query_offset, double dropout_p, int64_t seed,
                               bool return_probs, bool self_attention);

OutLse shared_value_attention_with_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const std::optional<at::Tensor>& key_lengths, double scale,
                                            bool return_probs);

// (out, lse, log_mass, alpha_context, beta_context, alpha, beta)
using GmmOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

GmmOutputs gmm_attention_with_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega,
                                       const at::Tensor& mu, const at::Tensor& sigma, const at::Tensor& gate,
                                       const std::optional<at::Tensor>& local_center,
                                       const std::optional<at::Tensor>& local_width, double scale,
                                       int64_t normalization, double sigma_floor, bool return_weights);

// (out, gate) of multihop_gate; (out, gate, hidden) of multihop_second_hop
std::tuple<at::Tensor, at::Tensor> multihop_gate_with_autograd(const at::Tensor& query_proj,
                                                               const at::Tensor& head_proj,
                                                               const at::Tensor& value_proj, const at::Tensor& v_b);

std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_with_autograd(
    const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b);

// q, k and v: the schema's Tensor[] arguments (one tensor per encoder layer or value set)
OutLse multilayer_attention_with_autograd(const std::vector<at::Tensor>& q, const std::vector<at::Tensor>& k,
                                          const std::vector<at::Tensor>& v,
                                          const std::optional<at::Tensor>& key_lengths, int64_t num_heads,
                                          double scale, bool layer_specific, bool return_probs);

}  // namespace mma_nmt::eager
