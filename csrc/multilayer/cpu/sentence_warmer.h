// Reading a sentence's rows front to back before its heads read them piece by piece (multilayer_kernel.h).
//
// A fused head reads its rows as pieces, D values of every row of E in each projection tensor: for WMT base 256 bytes
// at a 2 KiB stride. The hardware prefetchers do not follow that pattern. Copying 8 MiB from memory on one thread ran
// at 6-8 GB/s in such 256-byte pieces and at 12 GB/s in whole rows. The kernels' tasks are head-major, so a thread runs
// all heads of a sentence one after the other. Before the first of them it reads the sentence's block of every tensor
// in order, one load per cache line, and the heads then find their pieces in cache. At WMT base M-00 (n = 4, 32
// sentences of 32 tokens) that made the forward 1.15x and the backward 1.16x faster
// (benchmarks/results/multilayer_attention_cpu.md).
//
// Included by multilayer_kernel.h inside its instruction-set build (CPU_CAPABILITY), like the attention blocks.
#pragma once

#include <cstdint>
#include <vector>

namespace mma_nmt::multilayer::cpu::MMA_NMT_CPU_ISA {
namespace {

class SentenceWarmer {
 public:
  // Sentences with more bytes than this in all tensors together are not read ahead: their first rows would leave the
  // cache before their last head reads them. It helped at up to 3 MiB a sentence here (32 MiB of last-level cache for
  // 2 threads).
  static constexpr int64_t kMaxBytes = int64_t(4) << 20;

  // `tensor` holds sentence b at elements [b * sentence_elems, (b + 1) * sentence_elems).
  template <typename T>
  void add(const T* tensor, int64_t sentence_elems) {
    const int64_t bytes = sentence_elems * static_cast<int64_t>(sizeof(T));
    blocks_.push_back({reinterpret_cast<const unsigned char*>(tensor), bytes});
    sentence_bytes_ += bytes;
  }

  // Reads sentence b's blocks into cache, unless they were the last ones read or are too large. The values are not
  // used (a freshly allocated output is read too); unsigned char reads of them are well defined.
  void before_sentence(int64_t b) {
    if (b == last_ || sentence_bytes_ > kMaxBytes) return;
    last_ = b;
    unsigned sum = 0;
    for (const Block& block : blocks_) {
      const unsigned char* first = block.base + b * block.bytes;
      for (int64_t i = 0; i < block.bytes; i += kCacheLine) sum += first[i];
    }
    volatile unsigned sink = sum;  // so that the loads are not left out
    static_cast<void>(sink);
  }

 private:
  static constexpr int64_t kCacheLine = 64;
  struct Block {
    const unsigned char* base;
    int64_t bytes;  // one sentence's
  };
  std::vector<Block> blocks_;
  int64_t sentence_bytes_ = 0;
  int64_t last_ = -1;  // the sentence read last
};

}  // namespace
}  // namespace mma_nmt::multilayer::cpu::MMA_NMT_CPU_ISA
