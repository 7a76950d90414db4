// The per-row inputs of the GMM mixture (omega, mu, sigma, the gate, the local bias's center and width) and their
// gradients as the CUDA kernels address them: in q's dtype, or in acc_t (float32) beside float16/bfloat16 q, k and v.
// The second is what CUDA autocast hands the operator (mma_nmt/ops/autocast.py): the mixture comes out of softmax and
// exp in float32, and rounding a mean (a source position) to bfloat16 would move it by up to a whole position from
// 256 on. Exactly one of the two pointers is set; both are null for an absent optional input. The choice is one
// warp-uniform branch per read, so the kernels keep one instantiation per dtype of q.
// Plain data with HOST_DEVICE accessors: the kernels take it by value, the emulated tests run it on the CPU.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

#include "common/host_device.h"

namespace mma_nmt::gmm::cuda {

template <typename scalar_t, typename acc_t>
struct MixtureIn {
  const scalar_t* narrow;
  const acc_t* wide;

  MMA_HOST_DEVICE bool present() const { return narrow != nullptr || wide != nullptr; }
  MMA_HOST_DEVICE acc_t operator[](int64_t i) const {
    return wide != nullptr ? wide[i] : static_cast<acc_t>(narrow[i]);
  }
  // The values from element `offset` on (the mixture of one query row).
  MMA_HOST_DEVICE MixtureIn at(int64_t offset) const {
    return {narrow != nullptr ? narrow + offset : nullptr, wide != nullptr ? wide + offset : nullptr};
  }
};

template <typename scalar_t, typename acc_t>
struct MixtureOut {
  scalar_t* narrow;
  acc_t* wide;

  MMA_HOST_DEVICE void set(int64_t i, acc_t value) const {
    if (wide != nullptr) {
      wide[i] = value;
    } else {
      narrow[i] = static_cast<scalar_t>(value);
    }
  }
};

// `t`'s data as the kernels read it: in acc_t where its dtype is acc_t's and not q's (`narrow_dtype`), else in
// scalar_t; null for an undefined tensor or a (0,) placeholder. The argument checks (gmm_checks.cpp) allow only these.
template <typename scalar_t, typename acc_t>
MixtureIn<scalar_t, acc_t> mixture_in(const at::Tensor& t, at::ScalarType narrow_dtype) {
  if (!t.defined() || t.numel() == 0) return {nullptr, nullptr};
  TORCH_INTERNAL_ASSERT(t.is_contiguous(), "mixture_in: the mixture's inputs are made contiguous first");
  if (t.scalar_type() == narrow_dtype) return {t.data_ptr<scalar_t>(), nullptr};
  return {nullptr, t.data_ptr<acc_t>()};
}

template <typename scalar_t, typename acc_t>
MixtureOut<scalar_t, acc_t> mixture_out(const at::Tensor& t, at::ScalarType narrow_dtype) {
  if (!t.defined() || t.numel() == 0) return {nullptr, nullptr};
  if (t.scalar_type() == narrow_dtype) return {t.data_ptr<scalar_t>(), nullptr};
  return {nullptr, t.data_ptr<acc_t>()};
}

}  // namespace mma_nmt::gmm::cuda
