// The CPU GMM kernels built for one instruction set; CMake gives this file the matching compiler flags.
#define CPU_CAPABILITY DEFAULT
#define CPU_CAPABILITY_DEFAULT
#define MMA_NMT_CPU_ISA isa_default
#include "gmm/cpu/gmm_kernel.h"
