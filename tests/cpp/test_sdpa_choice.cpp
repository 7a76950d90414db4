// The composition's reading of torch's fused-kernel answer (attention/sdpa_choice.h): in float32 a memory-efficient,
// flash or cuDNN answer (cuDNN is torch's first choice on sm90 and sm100 since 2.9) means the memory-efficient kernel
// where its alignment holds; math means the hand-written kernel; float16 and bfloat16 groups always take the
// hand-written kernel, since the fused kernels' gradients failed the CUDA suite on an H200 in half precision.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

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

// Past the hand-written kernels' sizes (long_call) float32 and float64 take the composition, half precision never
// (flash takes it there); below them every dtype runs the hand-written kernels.
TEST(SdpaChoice, CompositionsServeLongFloat32AndFloat64CallsOnlyByDefault) {
  for (const bool long_call : {false, true}) {
    EXPECT_EQ(mma_nmt::composition_by_default(c10::ScalarType::Float, long_call), long_call);
    EXPECT_EQ(mma_nmt::composition_by_default(c10::ScalarType::Double, long_call), long_call);
    EXPECT_FALSE(mma_nmt::composition_by_default(c10::ScalarType::Half, long_call));
    EXPECT_FALSE(mma_nmt::composition_by_default(c10::ScalarType::BFloat16, long_call));
  }
}

// MMA_NMT_CUDA_KERNELS, set for one test and restored.
class DispatchSwitch {
 public:
  explicit DispatchSwitch(const char* value) {
    if (const char* old = std::getenv(kName)) old_ = old;
    if (value != nullptr) {
      setenv(kName, value, 1);
    } else {
      unsetenv(kName);
    }
  }
  ~DispatchSwitch() {
    if (old_) {
      setenv(kName, old_->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }

 private:
  static constexpr const char* kName = "MMA_NMT_CUDA_KERNELS";
  std::optional<std::string> old_;
};

TEST(SdpaChoice, TheSwitchForcesOrForbidsTheCompositionInEveryDtype) {
  const c10::ScalarType dtypes[] = {c10::ScalarType::Float, c10::ScalarType::Double, c10::ScalarType::Half,
                                    c10::ScalarType::BFloat16};
  for (const c10::ScalarType dtype : dtypes) {
    for (const bool long_call : {false, true}) {
      {
        const DispatchSwitch unset(nullptr);
        EXPECT_EQ(mma_nmt::composition_wanted(dtype, long_call), mma_nmt::composition_by_default(dtype, long_call));
      }
      {
        const DispatchSwitch flash("flash");  // flash changes attention's flash calls only
        EXPECT_EQ(mma_nmt::composition_wanted(dtype, long_call), mma_nmt::composition_by_default(dtype, long_call));
      }
      {
        const DispatchSwitch composition("composition");
        EXPECT_TRUE(mma_nmt::composition_wanted(dtype, long_call));
        EXPECT_FALSE(mma_nmt::handwritten_cuda_kernels_only());
        EXPECT_FALSE(mma_nmt::flash_cuda_kernels_opted_in());
      }
      for (const char* handwritten : {"handwritten", "rows"}) {
        const DispatchSwitch forced(handwritten);
        EXPECT_FALSE(mma_nmt::composition_wanted(dtype, long_call)) << handwritten;
        EXPECT_FALSE(mma_nmt::composition_cuda_kernels_opted_in()) << handwritten;
      }
    }
  }
}

}  // namespace
