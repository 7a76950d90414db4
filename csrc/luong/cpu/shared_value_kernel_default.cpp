// The CPU shared-value attention kernels built for one instruction set; CMake gives this file the matching flags.
#define CPU_CAPABILITY DEFAULT
#define CPU_CAPABILITY_DEFAULT
#define MMA_NMT_CPU_ISA isa_default
#include "luong/cpu/shared_value_kernel.h"
