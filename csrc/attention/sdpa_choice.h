// Whether the composition (attention_composition.cpp) calls torch's memory-efficient kernel for a group on CUDA, from
// torch's own answer (at::_fused_sdp_choice, an sdp::SDPBackend value) and the call's form; otherwise the group runs
// the hand-written kernel. Plain C++, so the CPU tests check the table.
//
// The composition speaks that kernel's conventions (an additive bias; lse padded to 32 rows). torch 2.9 and later
// rank cuDNN's attention first on sm90 and sm100 (check_prefer_cudnn_attention in ATen's sdp_utils.cpp), so on an
// H100 or H200 the answer for half-precision inputs is cuDNN. Taking that answer as "no fused kernel" sent every group
// to the hand-written warp kernel there: the H200 lease of 2026-11-28 measured the default path as slow as
// MMA_NMT_CUDA_KERNELS=handwritten (benchmarks/results/2026-11-28.nmt-sizes.notes.md).
//
// A lease later the same day reached the fused kernels in half precision for the first time (earlier GPU runs had
// taken the cuDNN answer as "none", so half-precision groups always ran the hand-written kernel) and the CUDA suite
// found grad_q wrong, by orders of magnitude, in float16 and bfloat16: first with flash for unmasked groups, then with
// the memory-efficient kernel for every group (a mixed decoder step without padding, GMM's dot-product half,
// multi-layer attention with joint weights; the outputs were right, and every float32 case passed). On an A100, where
// torch answers flash or efficient, the same calls would have taken that path. Until the cause is found and the suite
// passes on a GPU, the composition calls torch's fused kernels in float32 only (the memory-efficient kernel, whatever
// torch answers, where its alignment holds); float16 and bfloat16 groups run the hand-written kernel, as they did on
// every H200 run before. FlashAttention-2 runs only through attention_cuda.cpp's own calls (flash_plan.h), which
// passed all 14 probe cases on the H200, gradients included. Calling flash from the composition again (where
// torch answers flash, unmasked half-precision rows in steps of 8 up to 256) waits for that failure's cause.
#pragma once

#include <cstdint>

namespace mma_nmt::attention {

// Values of sdp::SDPBackend (ATen/native/transformers/sdp_utils_cpp.h).
constexpr int64_t kTorchMath = 0;
constexpr int64_t kTorchFlash = 1;
constexpr int64_t kTorchEfficient = 2;
constexpr int64_t kTorchCudnn = 3;

struct SdpaForm {
  bool has_mask;        // a (B, 1, T, S) visibility mask
  bool half_precision;  // float16 or bfloat16
  int64_t head_dim;     // q, k and v's common head size
};

// The memory-efficient kernel reads rows in 16-byte steps: 8 half-precision or 4 single-precision elements.
inline bool efficient_takes_form(const SdpaForm& f) { return f.head_dim % (f.half_precision ? 8 : 4) == 0; }

// True: the memory-efficient kernel serves the group; false: the hand-written kernel does.
inline bool use_efficient_kernel(int64_t torch_choice, const SdpaForm& form) {
  if (form.half_precision) return false;  // wrong gradients on the H200 (above)
  switch (torch_choice) {
    case kTorchEfficient:
      return true;
    case kTorchFlash:
    case kTorchCudnn:
      return efficient_takes_form(form);
    default:  // math, or no fused kernel at all
      return false;
  }
}

}  // namespace mma_nmt::attention
