// The CPU kernels of the whole second hop built for one instruction set; CMake gives this file the matching flags.
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2
#define MMA_NMT_CPU_ISA isa_avx2
#include "multihop/cpu/second_hop_kernel.h"
