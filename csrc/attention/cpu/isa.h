// Which build of the CPU kernels the running processor can execute. MMA_NMT_CPU_ISA=default|avx2|avx512 in the
// environment caps the choice (for benchmarks and for testing every build on one machine).
#pragma once

namespace mma_nmt::attention::cpu {

enum class Isa { kDefault = 0, kAvx2 = 1, kAvx512 = 2 };

Isa best_isa();
const char* isa_name(Isa isa);

}  // namespace mma_nmt::attention::cpu
