// The composition's reading of torch's fused-kernel answer (attention/sdpa_choice.h): in float32 a memory-efficient,
// flash or cuDNN answer (cuDNN is torch's first choice on sm90 and sm100 since 2.9) means the memory-efficient kernel
// where its alignment holds; math means the hand-written kernel; float16 and bfloat16 groups always take the
// hand-written kernel, since the fused kernels' gradients failed the CUDA suite on an H200 in half precision.
#include <gtest/gtest.h>

#include "attention/sdpa_choice.h"
#include "common/cuda_dispatch.h"

namespace {

using mma_nmt::attention::SdpaForm;
using mma_nmt::attention::use_efficient_kernel;
namespace a = mma_nmt::attention;

TEST(SdpaChoice, EveryFusedAnswerInFloat32BecomesTheEfficientKernel) {
  for (const int64_t answer : {a::kTorchEfficient, a::kTorchFlash, a::kTorchCudnn}) {
    EXPECT_TRUE(use_efficient_kernel(answer, SdpaForm{true, false, 64})) << answer;   // masked
    EXPECT_TRUE(use_efficient_kernel(answer, SdpaForm{false, false, 36})) << answer;  // 4-aligned
    EXPECT_TRUE(use_efficient_kernel(answer, SdpaForm{false, false, 264})) << answer;
  }
  // rows the efficient kernel cannot read in 16-byte steps: the hand-written kernel, unless torch itself chose it
  EXPECT_FALSE(use_efficient_kernel(a::kTorchFlash, SdpaForm{true, false, 6}));
  EXPECT_FALSE(use_efficient_kernel(a::kTorchCudnn, SdpaForm{true, false, 6}));
  EXPECT_TRUE(use_efficient_kernel(a::kTorchEfficient, SdpaForm{true, false, 6}));
}

TEST(SdpaChoice, HalfPrecisionGroupsTakeTheHandwrittenKernelWhateverTorchAnswers) {
  for (const int64_t answer : {a::kTorchMath, a::kTorchFlash, a::kTorchEfficient, a::kTorchCudnn}) {
    for (const bool mask : {false, true}) {
      EXPECT_FALSE(use_efficient_kernel(answer, SdpaForm{mask, true, 64})) << answer << " " << mask;
    }
  }
}

TEST(SdpaChoice, MathOrNoAnswerLeavesTheGroupToTheHandwrittenKernel) {
  EXPECT_FALSE(use_efficient_kernel(a::kTorchMath, SdpaForm{false, false, 64}));
  EXPECT_FALSE(use_efficient_kernel(-1, SdpaForm{false, false, 64}));
  EXPECT_FALSE(use_efficient_kernel(4, SdpaForm{false, false, 64}));  // overrideable
}

TEST(SdpaChoice, CompositionsServeFloat32AndFloat64OnlyByDefault) {
  EXPECT_TRUE(mma_nmt::composition_by_default(c10::ScalarType::Float));
  EXPECT_TRUE(mma_nmt::composition_by_default(c10::ScalarType::Double));
  EXPECT_FALSE(mma_nmt::composition_by_default(c10::ScalarType::Half));
  EXPECT_FALSE(mma_nmt::composition_by_default(c10::ScalarType::BFloat16));
}

}  // namespace
