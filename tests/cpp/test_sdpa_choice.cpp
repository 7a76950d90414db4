// The composition's reading of torch's fused-kernel answer (attention/sdpa_choice.h): flash and memory-efficient
// answers are taken as given, math means the hand-written kernel, and a cuDNN answer (torch's first choice on sm90 and
// sm100 since 2.9) becomes flash where flash takes the call, else the memory-efficient kernel where its alignment holds.
#include <gtest/gtest.h>

#include "attention/sdpa_choice.h"

namespace {

using mma_nmt::attention::SdpaForm;
using mma_nmt::attention::SdpaKernel;
using mma_nmt::attention::sdpa_kernel_for;
namespace a = mma_nmt::attention;

TEST(SdpaChoice, FlashAndEfficientAnswersAreTaken) {
  EXPECT_EQ(sdpa_kernel_for(a::kTorchFlash, SdpaForm{false, true, 64}), SdpaKernel::kFlash);
  EXPECT_EQ(sdpa_kernel_for(a::kTorchEfficient, SdpaForm{true, true, 64}), SdpaKernel::kEfficient);
  EXPECT_EQ(sdpa_kernel_for(a::kTorchEfficient, SdpaForm{false, false, 33}), SdpaKernel::kEfficient);
  // flash never takes the visibility mask, whatever torch answers
  EXPECT_EQ(sdpa_kernel_for(a::kTorchFlash, SdpaForm{true, true, 64}), SdpaKernel::kNone);
}

TEST(SdpaChoice, MathOrNoAnswerLeavesTheGroupToTheHandwrittenKernel) {
  EXPECT_EQ(sdpa_kernel_for(a::kTorchMath, SdpaForm{false, true, 64}), SdpaKernel::kNone);
  EXPECT_EQ(sdpa_kernel_for(-1, SdpaForm{false, true, 64}), SdpaKernel::kNone);
  EXPECT_EQ(sdpa_kernel_for(4, SdpaForm{false, true, 64}), SdpaKernel::kNone);  // overrideable
}

TEST(SdpaChoice, CudnnAnswerBecomesFlashWithoutAMaskInHalfPrecision) {
  for (const int64_t dim : {8, 64, 128, 256}) {
    EXPECT_EQ(sdpa_kernel_for(a::kTorchCudnn, SdpaForm{false, true, dim}), SdpaKernel::kFlash) << dim;
  }
}

TEST(SdpaChoice, CudnnAnswerBecomesEfficientWithAMaskOrWhereFlashCannotServe) {
  EXPECT_EQ(sdpa_kernel_for(a::kTorchCudnn, SdpaForm{true, true, 64}), SdpaKernel::kEfficient);    // masked
  EXPECT_EQ(sdpa_kernel_for(a::kTorchCudnn, SdpaForm{false, false, 64}), SdpaKernel::kEfficient);  // float32
  EXPECT_EQ(sdpa_kernel_for(a::kTorchCudnn, SdpaForm{false, true, 264}), SdpaKernel::kEfficient);  // above 256
  EXPECT_EQ(sdpa_kernel_for(a::kTorchCudnn, SdpaForm{false, false, 36}), SdpaKernel::kEfficient);  // 4-aligned float
}

TEST(SdpaChoice, CudnnAnswerWithoutAlignedRowsLeavesTheGroupToTheHandwrittenKernel) {
  EXPECT_EQ(sdpa_kernel_for(a::kTorchCudnn, SdpaForm{false, true, 60}), SdpaKernel::kNone);  // half, not 8-aligned
  EXPECT_EQ(sdpa_kernel_for(a::kTorchCudnn, SdpaForm{true, false, 6}), SdpaKernel::kNone);   // float, not 4-aligned
}

}  // namespace
