// Which of torch's fused attention kernels the composition calls (attention_composition.cpp), from torch's own answer
// (at::_fused_sdp_choice, an sdp::SDPBackend value) and the call's form. Plain C++, so the CPU tests check the table.
//
// The composition speaks the conventions of two kernels only: FlashAttention-2 (no mask; float16/bfloat16) and the
// memory-efficient kernel (an additive bias; lse padded to 32 rows). torch 2.9 and later rank cuDNN's attention first
// on sm90 and sm100 (check_prefer_cudnn_attention in ATen's sdp_utils.cpp), so on an H100 or H200 the answer for
// half-precision inputs is cuDNN. Taking that answer as "no fused kernel" sent every group to the hand-written warp
// kernel there: the H200 lease of 2026-11-28 measured the default path as slow as MMA_NMT_CUDA_KERNELS=handwritten
// (benchmarks/results/2026-11-28.nmt-sizes.notes.md).
//
// A cuDNN or flash answer now means the memory-efficient kernel, where its alignment holds. Not flash: the same lease
// ran the composition's flash calls (at::_scaled_dot_product_flash_attention and its backward, which no earlier GPU
// run had reached) and the CUDA suite found grad_q wrong in float16/bfloat16 for calls without padding (a mixed
// decoder step, GMM's dot-product half, multi-layer attention), while every case on the memory-efficient kernel
// passed. Until that is understood and tested on a GPU, flash runs only through MMA_NMT_CUDA_KERNELS=flash
// (attention_cuda.cpp's own FA2 calls, which passed there).
#pragma once

#include <cstdint>

namespace mma_nmt::attention {

// Values of sdp::SDPBackend (ATen/native/transformers/sdp_utils_cpp.h).
constexpr int64_t kTorchMath = 0;
constexpr int64_t kTorchFlash = 1;
constexpr int64_t kTorchEfficient = 2;
constexpr int64_t kTorchCudnn = 3;

enum class SdpaKernel { kFlash, kEfficient, kNone };

struct SdpaForm {
  bool has_mask;        // a (B, 1, T, S) visibility mask (flash takes none)
  bool half_precision;  // float16 or bfloat16 (flash takes nothing else)
  int64_t head_dim;     // q, k and v's common head size
};

// FlashAttention-2 as torch calls it without its front end's padding: head sizes in steps of 8 up to 256.
inline bool flash_takes_form(const SdpaForm& f) {
  return !f.has_mask && f.half_precision && f.head_dim % 8 == 0 && f.head_dim <= 256;
}

// The memory-efficient kernel reads rows in 16-byte steps: 8 half-precision or 4 single-precision elements.
inline bool efficient_takes_form(const SdpaForm& f) { return f.head_dim % (f.half_precision ? 8 : 4) == 0; }

// Flash where flash takes the call would be `flash_takes_form(form)`: kept for the day the composition's flash calls
// pass the CUDA suite (see above).
inline SdpaKernel sdpa_kernel_for(int64_t torch_choice, const SdpaForm& form) {
  switch (torch_choice) {
    case kTorchEfficient:
      return SdpaKernel::kEfficient;
    case kTorchFlash:
    case kTorchCudnn:
      return efficient_takes_form(form) ? SdpaKernel::kEfficient : SdpaKernel::kNone;
    default:  // math, or no fused kernel at all: the hand-written kernel serves the group
      return SdpaKernel::kNone;
  }
}

}  // namespace mma_nmt::attention
