// The composition's reading of torch's fused-kernel answer (attention/sdpa_choice.h): a memory-efficient answer is
// taken as given, math means the hand-written kernel, and a flash or cuDNN answer (cuDNN is torch's first choice on
// sm90 and sm100 since 2.9) becomes the memory-efficient kernel where its alignment holds: the composition's flash
// calls gave wrong grad_q on an H200 (sdpa_choice.h).
#include <gtest/gtest.h>

#include "attention/sdpa_choice.h"

namespace {

using mma_nmt::attention::SdpaForm;
using mma_nmt::attention::SdpaKernel;
using mma_nmt::attention::sdpa_kernel_for;
namespace a = mma_nmt::attention;

TEST(SdpaChoice, EfficientAnswerIsTaken) {
  EXPECT_EQ(sdpa_kernel_for(a::kTorchEfficient, SdpaForm{true, true, 64}), SdpaKernel::kEfficient);
  EXPECT_EQ(sdpa_kernel_for(a::kTorchEfficient, SdpaForm{false, false, 33}), SdpaKernel::kEfficient);
}

TEST(SdpaChoice, MathOrNoAnswerLeavesTheGroupToTheHandwrittenKernel) {
  EXPECT_EQ(sdpa_kernel_for(a::kTorchMath, SdpaForm{false, true, 64}), SdpaKernel::kNone);
  EXPECT_EQ(sdpa_kernel_for(-1, SdpaForm{false, true, 64}), SdpaKernel::kNone);
  EXPECT_EQ(sdpa_kernel_for(4, SdpaForm{false, true, 64}), SdpaKernel::kNone);  // overrideable
}

TEST(SdpaChoice, FlashOrCudnnAnswerBecomesTheEfficientKernel) {
  for (const int64_t answer : {a::kTorchFlash, a::kTorchCudnn}) {
    for (const int64_t dim : {8, 64, 128, 256, 264}) {
      EXPECT_EQ(sdpa_kernel_for(answer, SdpaForm{false, true, dim}), SdpaKernel::kEfficient) << answer << " " << dim;
    }
    EXPECT_EQ(sdpa_kernel_for(answer, SdpaForm{true, true, 64}), SdpaKernel::kEfficient);    // masked
    EXPECT_EQ(sdpa_kernel_for(answer, SdpaForm{false, false, 36}), SdpaKernel::kEfficient);  // 4-aligned float
    // rows the efficient kernel cannot read in 16-byte steps: the hand-written kernel
    EXPECT_EQ(sdpa_kernel_for(answer, SdpaForm{false, true, 60}), SdpaKernel::kNone);
    EXPECT_EQ(sdpa_kernel_for(answer, SdpaForm{true, false, 6}), SdpaKernel::kNone);
  }
}

TEST(SdpaChoice, FlashWouldTakeOnlyUnmaskedHalfPrecisionRowsInStepsOf8) {
  EXPECT_TRUE(mma_nmt::attention::flash_takes_form(SdpaForm{false, true, 64}));
  EXPECT_FALSE(mma_nmt::attention::flash_takes_form(SdpaForm{true, true, 64}));
  EXPECT_FALSE(mma_nmt::attention::flash_takes_form(SdpaForm{false, false, 64}));
  EXPECT_FALSE(mma_nmt::attention::flash_takes_form(SdpaForm{false, true, 264}));
}

}  // namespace
