// The CPU kernels of the whole second hop built for one instruction set; CMake gives this file the matching flags.
#define CPU_CAPABILITY DEFAULT
#define CPU_CAPABILITY_DEFAULT
#define MMA_NMT_CPU_ISA isa_default
#include "multihop/cpu/second_hop_kernel.h"
