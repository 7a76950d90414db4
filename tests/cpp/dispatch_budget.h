// Counts the ATen ops a piece of C++ dispatches, and the size of every tensor they return, for the launch budgets of
// tests/cpp/test_dispatch_budget.cpp (issue 48, point 5: launch creep fails on every commit, GPU or not).
//
// Why RecordFunction and not a Python TorchDispatchMode: the compositions (csrc/*/*_composition.cpp) are C++ functions
// that CI runs on CPU tensors only from the C++ tests, and a dispatch mode does not see the ops an ATen kernel calls
// from inside itself. RecordFunction (what torch.profiler records) fires at every dispatcher entry, nested or not.
//
// What counts, as a stand-in for CUDA kernel launches:
// - the leaves of the call tree: an op counts when none of the ops it calls counts (masked_fill = clone's copy_ +
//   masked_fill_, two; zeros = fill_, one);
// - a fused kernel counts once, its insides not at all: our own operators (mma_nmt::*, the hand-written kernel the
//   composition hands local heads to) and torch's fused attention kernels (_scaled_dot_product_*, _flash_attention_*,
//   _efficient_attention_*); on CPU these call ATen internally, on the GPU they are one kernel (the memory-efficient
//   backward a few);
// - never: view and metadata-only ops (resolve_conj and resolve_neg included) and bare allocations
//   (kViewOrAllocationOps below), which launch no kernel. Ops
//   that only sometimes copy (contiguous, reshape, to) are not counted themselves; the copy they make is.
// A CPU count is a proxy for the GPU's: SDPA picks the CPU flash kernel where CUDA picks the memory-efficient one.
#pragma once

#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace mma_nmt::testing {

struct DispatchCount {
  int64_t ops = 0;                           // leaves and fused kernels, as above
  std::map<std::string, int64_t> by_name;    // the same, per op name
  std::vector<std::string> large_outputs;    // "op: numel" for each buffer of at least `large_numel` elements an op
                                             // returns (once per buffer; not the insides of fused kernels)
};

inline bool is_view_or_allocation(const char* name) {
  static const char* const kViewOrAllocationOps[] = {
      "aten::view",         "aten::_unsafe_view", "aten::_reshape_alias", "aten::reshape",      "aten::as_strided",
      "aten::slice",        "aten::select",       "aten::narrow",         "aten::transpose",    "aten::permute",
      "aten::expand",       "aten::expand_as",    "aten::unsqueeze",      "aten::squeeze",      "aten::t",
      "aten::alias",        "aten::detach",       "aten::split",          "aten::split_with_sizes",
      "aten::chunk",        "aten::unbind",       "aten::unflatten",      "aten::flatten",      "aten::view_as",
      "aten::movedim",      "aten::movedim.int",  "aten::contiguous",     "aten::to",           "aten::type_as",
      "aten::empty",        "aten::empty_like",   "aten::empty_strided",  "aten::resize_",      "aten::lift_fresh",
      "aten::result_type",  "aten::size",         "aten::stride",         "aten::is_same_size", "aten::dim",
      "aten::set_",         "aten::_has_compatible_shallow_copy_type",
      // metadata unless a conjugate or negative bit is set, and then the copy they make counts: without these, a CPU
      // matmul (which resolves its operands' bits first) would count its two resolves instead of itself
      "aten::resolve_conj", "aten::resolve_neg"};
  for (const char* op : kViewOrAllocationOps) {
    if (std::strcmp(name, op) == 0) return true;
  }
  return false;
}

inline bool is_fused_kernel(const char* name) {
  return std::strncmp(name, "mma_nmt::", 9) == 0 || std::strstr(name, "_scaled_dot_product_") != nullptr ||
         std::strstr(name, "_flash_attention_") != nullptr || std::strstr(name, "_efficient_attention_") != nullptr;
}

// While alive, counts every op this thread dispatches into `count`. One at a time per thread.
class DispatchCounter {
 public:
  DispatchCounter(DispatchCount& count, int64_t large_numel) : count_(count), large_numel_(large_numel) {
    TORCH_CHECK(current() == nullptr, "DispatchCounter: one at a time per thread");
    current() = this;
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_enter, &on_exit)
                                             .needsOutputs(true)
                                             .scopes({at::RecordScope::FUNCTION}));
  }
  ~DispatchCounter() {
    at::removeCallback(handle_);
    current() = nullptr;
  }
  DispatchCounter(const DispatchCounter&) = delete;
  DispatchCounter& operator=(const DispatchCounter&) = delete;

 private:
  struct Frame {
    bool counted_below = false;  // an op under this one counts
    int fused_depth = 0;         // inside a fused kernel: nothing counts
  };

  static DispatchCounter*& current() {
    thread_local DispatchCounter* counter = nullptr;
    return counter;
  }

  static std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
    DispatchCounter* self = current();
    if (self == nullptr) return nullptr;
    const int outer_fused = self->stack_.empty() ? 0 : self->stack_.back().fused_depth;
    self->stack_.push_back(Frame{false, outer_fused + (is_fused_kernel(fn.name()) ? 1 : 0)});
    return nullptr;
  }

  static void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
    DispatchCounter* self = current();
    if (self == nullptr || self->stack_.empty()) return;
    const Frame frame = self->stack_.back();
    self->stack_.pop_back();
    const bool inside_fused = !self->stack_.empty() && self->stack_.back().fused_depth > 0;
    if (inside_fused) return;  // a fused kernel's insides: its workspace on CPU, nothing on the GPU
    for (const c10::IValue& output : fn.outputs()) {
      if (!output.isTensor() || !output.toTensor().defined() || !output.toTensor().has_storage()) continue;
      const at::Tensor& tensor = output.toTensor();
      if (tensor.numel() < self->large_numel_) continue;
      const c10::Storage& storage = tensor.storage();
      bool seen = false;  // clone's copy_ and masked_fill_ return one buffer: one allocation
      for (const c10::Storage& held : self->large_storages_) seen = seen || held.is_alias_of(storage);
      if (seen) continue;
      self->large_storages_.push_back(storage);  // held, so that no later allocation reuses its address
      self->count_.large_outputs.push_back(std::string(fn.name()) + ": " + std::to_string(tensor.numel()));
    }
    const bool fused = frame.fused_depth > (self->stack_.empty() ? 0 : self->stack_.back().fused_depth);
    const bool counts = fused || (!frame.counted_below && !is_view_or_allocation(fn.name()));
    if (counts) {
      ++self->count_.ops;
      ++self->count_.by_name[fn.name()];
    }
    if ((counts || frame.counted_below) && !self->stack_.empty()) self->stack_.back().counted_below = true;
  }

  DispatchCount& count_;
  int64_t large_numel_;
  at::CallbackHandle handle_;
  std::vector<Frame> stack_;
  std::vector<c10::Storage> large_storages_;
};

// A call's budget: its ops and its B x T x S buffers, as counted today (a change that lowers a count lowers it here).
struct Budget {
  int64_t ops;            // today's count: the most allowed
  int64_t large_buffers;  // buffers of >= B x T x S elements allowed
  int64_t target_ops;     // the target (documentation; the test asserts `ops`)
};

// B x T x S, the size from which an op's buffer counts as large, for an attention call of these sizes; H D must stay
// well under S there, so that only a (B, ., T, S) mask, bias or weight tensor reaches it.
inline int64_t attention_large_numel(int64_t batch, int64_t heads, int64_t query_len, int64_t key_len, int64_t dim) {
  const int64_t large = batch * query_len * key_len;
  EXPECT_LT(batch * heads * std::max(query_len, key_len) * dim, large) << "sizes must keep H D under S";
  return large;
}

inline DispatchCount count(const std::function<void()>& call, int64_t large_numel) {
  DispatchCount result;
  DispatchCounter counter(result, large_numel);
  call();
  return result;
}

inline std::string describe(const DispatchCount& c) {
  std::ostringstream os;
  os << c.ops << " ops:";
  for (const auto& [name, n] : c.by_name) os << " " << name << " x" << n;
  os << "; " << c.large_outputs.size() << " large buffers:";
  for (const auto& large : c.large_outputs) os << " [" << large << "]";
  return os.str();
}

inline void expect_within(const DispatchCount& c, const Budget& budget, const char* what) {
  std::cout << "[ budget   ] " << what << ": " << describe(c) << " (budget " << budget.ops << ", target "
            << budget.target_ops << ")\n";
  EXPECT_LE(c.ops, budget.ops) << what << " dispatches more ops than its budget (" << budget.ops << "; target "
                               << budget.target_ops << "): " << describe(c);
  EXPECT_LE(static_cast<int64_t>(c.large_outputs.size()), budget.large_buffers)
      << what << " makes more B x T x S buffers than its budget (" << budget.large_buffers
      << "; target 0): " << describe(c);
}

}  // namespace mma_nmt::testing
