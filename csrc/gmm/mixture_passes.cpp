#include "gmm/mixture_passes.h"

namespace mma_nmt::gmm {

MixtureInputs mixture_inputs(const at::Tensor& omega, const at::Tensor& mu, const at::Tensor& sigma,
                             const std::optional<at::Tensor>& key_lengths, at::ScalarType acc) {
  const auto as_acc = [&](const at::Tensor& t) { return t.to(acc).contiguous(); };
  return {as_acc(omega), as_acc(mu), as_acc(sigma), key_lengths.has_value() ? key_lengths->contiguous() : at::Tensor()};
}

MixtureForward allocate_mixture_forward(const GmmParams& p, const MixtureInputs& in) {
  const auto options = in.omega.options();
  return {at::empty({p.batch, p.heads, p.query_len, p.key_len}, options),
          at::empty({p.batch, p.heads, p.query_len}, options)};
}

MixtureBackward allocate_mixture_backward(const GmmParams& p, const MixtureInputs& in) {
  const auto options = in.omega.options();
  return {at::empty({p.batch, p.heads, p.query_len, p.key_len}, options),
          at::empty({p.batch, p.heads, p.query_len}, options), at::empty_like(in.omega), at::empty_like(in.omega),
          at::empty_like(in.omega)};
}

}  // namespace mma_nmt::gmm
