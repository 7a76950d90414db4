// The CPU multi-layer attention kernels built for one instruction set; CMake gives this file the matching flags.
#define CPU_CAPABILITY DEFAULT
#define CPU_CAPABILITY_DEFAULT
#define MMA_NMT_CPU_ISA isa_default
#include "multilayer/cpu/multilayer_kernel.h"
