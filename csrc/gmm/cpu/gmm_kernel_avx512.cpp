// The CPU GMM kernels built for one instruction set; CMake gives this file the matching compiler flags.
#define CPU_CAPABILITY AVX512
#define CPU_CAPABILITY_AVX512
#define MMA_NMT_CPU_ISA isa_avx512
#include "gmm/cpu/gmm_kernel.h"
