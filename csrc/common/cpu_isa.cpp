#include "common/cpu_isa.h"

#include <cstdlib>
#include <cstring>

namespace mma_nmt::cpu {
namespace {

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kDefault;
}

Isa capped(Isa found) {
  const char* cap = std::getenv("MMA_NMT_CPU_ISA");
  if (cap == nullptr) return found;
  Isa wanted = found;
  if (std::strcmp(cap, "default") == 0) wanted = Isa::kDefault;
  if (std::strcmp(cap, "avx2") == 0) wanted = Isa::kAvx2;
  if (std::strcmp(cap, "avx512") == 0) wanted = Isa::kAvx512;
  return static_cast<int>(wanted) < static_cast<int>(found) ? wanted : found;
}

}  // namespace

Isa best_isa() {
  static const Isa found = detect();
  return capped(found);  // read on every call, so tests can switch builds within one process
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "default";
  }
}

}  // namespace mma_nmt::cpu
