// The sequence-starts kernel of the FlashAttention-2 path (attention/cuda/flash_sequence_starts_kernel.cuh) under the
// HIP CPU emulator, against its host twin (flash_sequence_starts_on_host, which tests/cpp/test_flash_plan.cpp checks
// against the rule): self-attention and cross-attention, lengths to clamp, empty sentences, and batches whose table
// spans several blocks.
#include "emulated_testing.h"  // first: torch's headers before HIP's

#include <c10/util/Exception.h>

#include <cstdint>
#include <vector>

#include "attention/cuda/flash_sequence_starts_kernel.cuh"
#include "attention/flash_calls.h"

namespace mma_nmt::emulated {
namespace {

struct StartsCase {
  int64_t batch, query_len, key_len;
};

TEST(EmulatedFlashSequenceStarts, KernelMatchesItsHostTwin) {
  at::manual_seed(3);
  for (const StartsCase& c : {StartsCase{1, 1, 1}, StartsCase{3, 7, 7}, StartsCase{5, 4, 9}, StartsCase{50, 13, 13},
                              StartsCase{97, 6, 11}}) {
    // lengths in [-2, S + 2]: out-of-range values are clamped, as the attention kernels clamp them
    const at::Tensor lengths = at::randint(-2, c.key_len + 3, {c.batch}, at::kLong);
    const at::Tensor got = attention::cuda::run_flash_sequence_starts(lengths, c.query_len, c.key_len,
                                                                      emulated_launch());
    const at::Tensor want = attention::flash_sequence_starts_on_host(lengths, c.query_len, c.key_len);
    EXPECT_EQ(got.scalar_type(), at::kInt);
    EXPECT_TRUE(at::equal(got, want)) << "B " << c.batch << ", T " << c.query_len << ", S " << c.key_len << "\n"
                                      << got << "\n" << want;
  }
}

TEST(EmulatedFlashSequenceStarts, RefusesRowsThatOverflowInt32) {
  const at::Tensor lengths = at::zeros({3}, at::kLong);
  EXPECT_THROW(attention::cuda::run_flash_sequence_starts(lengths, 2, (int64_t{1} << 31) / 3 + 1, emulated_launch()),
               c10::Error);
}

}  // namespace
}  // namespace mma_nmt::emulated
