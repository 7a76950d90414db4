// Which build of the CPU kernels the running processor can execute. MMA_NMT_CPU_ISA=default|avx2|avx512 in the
// environment caps the choice (for benchmarks and for testing every build on one machine).
#pragma once

namespace mma_nmt::cpu {

enum class Isa { kDefault = 0, kAvx2 = 1, kAvx512 = 2 };

Isa best_isa();
const char* isa_name(Isa isa);

}  // namespace mma_nmt::cpu

// Calls `function(...)` from the kernel build (namespaces isa_avx512, isa_avx2, isa_default) that best_isa() picks.
#define MMA_NMT_CPU_DISPATCH(function, ...)                                         \
  switch (::mma_nmt::cpu::best_isa()) {                                 \
    case ::mma_nmt::cpu::Isa::kAvx512: isa_avx512::function(__VA_ARGS__); break; \
    case ::mma_nmt::cpu::Isa::kAvx2: isa_avx2::function(__VA_ARGS__); break;     \
    default: isa_default::function(__VA_ARGS__); break;                            \
  }

// Declares the functions of one operator's kernel build in the namespace of every build (isa_default, isa_avx2,
// isa_avx512: the namespaces MMA_NMT_CPU_DISPATCH calls into, the MMA_NMT_CPU_ISA of the generated kernel sources).
#define MMA_NMT_DECLARE_FOR_EACH_ISA(...) \
  namespace isa_default {                 \
  __VA_ARGS__                             \
  }                                       \
  namespace isa_avx2 {                    \
  __VA_ARGS__                             \
  }                                       \
  namespace isa_avx512 {                  \
  __VA_ARGS__                             \
  }
