// AttentionKernels (attention_composition.h) that call mma_nmt::attention and mma_nmt::attention_backward through the
// dispatcher: whatever the operator runs for the tensors' device, dtype and size (docs/cuda.md's dispatch table on the
// GPU, the CPU kernel on CPU tensors). For the compositions of other operators that hold an attention inside, like
// GMM's dot-product half (gmm/gmm_composition.h). No weights asked for, as AttentionKernels says.
#pragma once

#include "attention/attention_composition.h"

namespace mma_nmt::attention {

AttentionKernels dispatched_attention_kernels();

}  // namespace mma_nmt::attention
