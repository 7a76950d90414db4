// The CPU head-gate kernels built for one instruction set; CMake gives this file the matching compiler flags.
#define CPU_CAPABILITY DEFAULT
#define CPU_CAPABILITY_DEFAULT
#define MMA_NMT_CPU_ISA isa_default
#include "multihop/cpu/head_gate_kernel.h"
