#include "emulated_testing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>

namespace mma_nmt::emulated {
namespace {

// Largest error seen per "<kernel> <dtype> <output>", printed when the test program ends.
class ErrorSummary : public ::testing::Environment {
 public:
  void record(const std::string& key, double error) {
    const std::lock_guard<std::mutex> lock(mutex_);
    double& worst = worst_[key];
    worst = std::max(worst, error);
  }
  void TearDown() override {
    if (worst_.empty()) return;
    std::printf("[emulated] largest |emulated CUDA kernel - CPU operator| / (1 + |CPU|) per kernel, dtype, output:\n");
    for (const auto& [key, error] : worst_) std::printf("[emulated]   %-52s %.3g\n", key.c_str(), error);
  }

 private:
  std::mutex mutex_;
  std::map<std::string, double> worst_;
};

// Registered before main() runs the tests; gtest owns it.
ErrorSummary* const summary_environment =
    static_cast<ErrorSummary*>(::testing::AddGlobalTestEnvironment(new ErrorSummary));

}  // namespace

double scaled_max_error(const at::Tensor& got, const at::Tensor& want) {
  if (got.numel() == 0) return 0.0;
  const at::Tensor a = got.to(at::kDouble), b = want.to(at::kDouble);
  const at::Tensor equal = a == b;  // also equal infinities
  at::Tensor error = ((a - b).abs() / (b.abs() + 1.0)).masked_fill(equal, 0.0);
  const double inf = std::numeric_limits<double>::infinity();
  error = at::nan_to_num(error, inf, inf, inf);  // a NaN, or an infinity on one side only
  return error.max().item<double>();
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const DtypeCase& dtype, const std::string& kernel,
                  const std::string& output) {
  ASSERT_EQ(got.sizes(), want.sizes()) << kernel << " " << output;
  const double error = scaled_max_error(got, want);
  summary_environment->record(kernel + " " + dtype_name(dtype.dtype) + " " + output, error);
  EXPECT_LE(error, dtype.tolerance) << kernel << " " << dtype_name(dtype.dtype) << " " << output
                                    << ": the emulated CUDA kernel differs from the CPU operator";
}

void expect_as_accurate_as_cpu(const at::Tensor& got, const at::Tensor& cpu, const at::Tensor& exact,
                               const DtypeCase& dtype, const std::string& kernel, const std::string& output) {
  ASSERT_EQ(got.sizes(), exact.sizes()) << kernel << " " << output;
  const double error = scaled_max_error(got, exact), cpu_error = scaled_max_error(cpu, exact);
  summary_environment->record(kernel + " " + dtype_name(dtype.dtype) + " " + output + " vs float64", error);
  EXPECT_LE(error, std::max(dtype.tolerance, 4 * cpu_error))
      << kernel << " " << dtype_name(dtype.dtype) << " " << output << ": the emulated CUDA kernel is " << error
      << " from the float64 CPU operator, the CPU operator in its dtype " << cpu_error;
}

at::Tensor random_input(at::IntArrayRef shape, const DtypeCase& dtype) {
  return at::randn(shape, at::TensorOptions().dtype(at::kDouble)).to(dtype.dtype);
}

at::Tensor head_view(const at::Tensor& x, int64_t sets, int64_t which) {
  const int64_t batch = x.size(0), heads = x.size(1), len = x.size(2), dim = x.size(3);
  at::Tensor projection = at::full({batch, len, sets * heads * dim}, std::nan(""), x.options());
  at::Tensor view = projection.narrow(2, which * heads * dim, heads * dim)
                        .view({batch, len, heads, dim})  // (B, L, H, D)
                        .transpose(1, 2);                // (B, H, L, D) view
  view.copy_(x);
  return view;
}

}  // namespace mma_nmt::emulated
