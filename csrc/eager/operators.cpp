#include "eager/operators.h"

#include <utility>

#include "eager/gmm_function.h"
#include "eager/multihop_functions.h"
#include "eager/multilayer_function.h"
#include "eager/out_lse_function.h"

namespace mma_nmt::eager {

using at::Tensor;
using OptionalTensor = std::optional<at::Tensor>;

// The traits of OutLseFunction per operator (named outside an anonymous namespace: the autograd node's name,
// grad_fn.name() in Python, is "torch::autograd::CppNode<mma_nmt::eager::OutLseFunction<mma_nmt::eager::Attention> >").

struct Attention {
  static constexpr const char* kName = "mma_nmt.attention";
  static constexpr const char* kSchema = "mma_nmt::attention";
  static constexpr const char* kBackwardSchema = "mma_nmt::attention_backward";
  // head_kinds, window, scale, query_offset, dropout_p, seed, then (after return_probs in the forward) self_attention
  using Options = std::tuple<std::vector<int64_t>, int64_t, double, int64_t, double, int64_t, bool>;
  static constexpr std::size_t kOptionsBeforeReturnProbs = 6;
  using ForwardSignature = OutLse(const Tensor&, const Tensor&, const Tensor&, const OptionalTensor&, at::IntArrayRef,
                                  int64_t, double, int64_t, double, int64_t, bool, bool);
  using BackwardSignature = OutLse(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&, const OptionalTensor&, at::IntArrayRef, int64_t, double, int64_t,
                                   double, int64_t, bool);
};

struct SharedValueAttention {
  static constexpr const char* kName = "mma_nmt.shared_value_attention";
  static constexpr const char* kSchema = "mma_nmt::shared_value_attention";
  static constexpr const char* kBackwardSchema = "mma_nmt::shared_value_attention_backward";
  using Options = std::tuple<double>;  // scale
  static constexpr std::size_t kOptionsBeforeReturnProbs = 1;
  using ForwardSignature = OutLse(const Tensor&, const Tensor&, const Tensor&, const OptionalTensor&, double, bool);
  using BackwardSignature = OutLse(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&, const OptionalTensor&, double);
};

OutLse attention_with_autograd(const Tensor& q, const Tensor& k, const Tensor& v, const OptionalTensor& key_lengths,
                               std::vector<int64_t> head_kinds, int64_t window, double scale, int64_t query_offset,
                               double dropout_p, int64_t seed, bool return_probs, bool self_attention) {
  return OutLseFunction<Attention>::apply_operator(q, k, v, key_lengths, return_probs, std::move(head_kinds), window,
                                                   scale, query_offset, dropout_p, seed, self_attention);
}

OutLse shared_value_attention_with_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                            const OptionalTensor& key_lengths, double scale, bool return_probs) {
  return OutLseFunction<SharedValueAttention>::apply_operator(q, k, v, key_lengths, return_probs, scale);
}

GmmOutputs gmm_attention_with_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const OptionalTensor& key_lengths, const Tensor& omega, const Tensor& mu,
                                       const Tensor& sigma, const Tensor& gate, const OptionalTensor& local_center,
                                       const OptionalTensor& local_width, double scale, int64_t normalization,
                                       double sigma_floor, bool return_weights) {
  const auto o = GmmFunction::apply(q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width, scale,
                                    normalization, sigma_floor, return_weights);
  return {o[0], o[1], o[2], o[3], o[4], o[5], o[6]};
}

std::tuple<Tensor, Tensor> multihop_gate_with_autograd(const Tensor& query_proj, const Tensor& head_proj,
                                                       const Tensor& value_proj, const Tensor& v_b) {
  const auto o = HeadGateFunction::apply(query_proj, head_proj, value_proj, v_b);
  return {o[0], o[1]};
}

std::tuple<Tensor, Tensor, Tensor> multihop_second_hop_with_autograd(const Tensor& q, const Tensor& a,
                                                                     const Tensor& w_b, const Tensor& u_b,
                                                                     const OptionalTensor& u_c, const Tensor& v_b) {
  const auto o = SecondHopFunction::apply(q, a, w_b, u_b, u_c, v_b);
  return {o[0], o[1], o[2]};
}

OutLse multilayer_attention_with_autograd(const std::vector<Tensor>& q, const std::vector<Tensor>& k,
                                          const std::vector<Tensor>& v, const OptionalTensor& key_lengths,
                                          int64_t num_heads, double scale, bool layer_specific, bool return_probs) {
  // TensorList, not the vectors: autograd spreads a TensorList into one input per tensor
  const auto o = MultilayerFunction::apply(at::TensorList(q), at::TensorList(k), at::TensorList(v), key_lengths,
                                           num_heads, scale, layer_specific, return_probs);
  return {o[0], o[1], o[2]};
}

}  // namespace mma_nmt::eager
