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
// A lease later the same day reached the fused kernels in half precision for the first time (earlier GPU runs had
// taken the cuDNN answer as "none", so half-precision groups always ran the hand-written kernel) and the CUDA suite
// found grad_q wrong, by orders of magnitude, in float16 and bfloat16: first with flash for unmasked groups, then with
// the memory-efficient kernel for every group (a mixed decoder step without padding, GMM's dot-product half,
// multi-layer attention with joint weights; the outputs were right, and every float32 case passed). On an A100, where
// torch answers flash or efficient, the same calls would have taken that path. Until the cause is found and the suite
// passes on a GPU, the composition calls torch's fused kernels in float32 only (the memory-efficient kernel, whatever
// torch answers, where its alignment holds); float16 and bfloat16 groups run the hand-written kernel, as they did on
// every H200 run before. FlashAttention-2 runs only through MMA_NMT_CUDA_KERNELS=flash (attention_cuda.cpp's own
// calls, which passed all 14 probe cases on the H200, gradients included).
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

// Flash where flash takes the call would be `flash_takes_form(form)`: kept for the day the composition's fused calls
// pass the CUDA suite in half precision (see above).
inline SdpaKernel sdpa_kernel_for(int64_t torch_choice, const SdpaForm& form) {
  if (form.half_precision) return SdpaKernel::kNone;
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
