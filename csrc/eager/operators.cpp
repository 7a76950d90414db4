#include "eager/operators.h"

#include <utility>

#include "eager/gmm_function.h"
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
  // head_kinds, window, scale, query_offset, dropout_p, seed
  using Options = std::tuple<std::vector<int64_t>, int64_t, double, int64_t, double, int64_t>;
  using ForwardSignature = OutLse(const Tensor&, const Tensor&, const Tensor&, const OptionalTensor&, at::IntArrayRef,
                                  int64_t, double, int64_t, double, int64_t, bool);
  using BackwardSignature = OutLse(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&, const OptionalTensor&, at::IntArrayRef, int64_t, double, int64_t,
                                   double, int64_t);
};

struct SharedValueAttention {
  static constexpr const char* kName = "mma_nmt.shared_value_attention";
  static constexpr const char* kSchema = "mma_nmt::shared_value_attention";
  static constexpr const char* kBackwardSchema = "mma_nmt::shared_value_attention_backward";
  using Options = std::tuple<double>;  // scale
  using ForwardSignature = OutLse(const Tensor&, const Tensor&, const Tensor&, const OptionalTensor&, double, bool);
  using BackwardSignature = OutLse(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   const Tensor&, const OptionalTensor&, double);
};

OutLse attention_with_autograd(const Tensor& q, const Tensor& k, const Tensor& v, const OptionalTensor& key_lengths,
                               std::vector<int64_t> head_kinds, int64_t window, double scale, int64_t query_offset,
                               double dropout_p, int64_t seed, bool return_probs) {
  return OutLseFunction<Attention>::apply_operator(q, k, v, key_lengths, return_probs, std::move(head_kinds), window,
                                                   scale, query_offset, dropout_p, seed);
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

}  // namespace mma_nmt::eager
