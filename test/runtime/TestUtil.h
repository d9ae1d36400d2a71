//===- TestUtil.h - Shared helpers for the runtime tests --------*- C++ -*-===//
//
// Random inputs and a central-difference gradient checker. The checker
// perturbs float inputs, evaluates a scalar loss accumulated in double, and
// compares with the analytic gradient using a relative tolerance with an
// absolute floor (float rounding of the loss limits how small a derivative can
// be resolved).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_TESTUTIL_H
#define LOOM_TEST_RUNTIME_TESTUTIL_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace loom::test {

/// n uniform token ids in [0, vocab) from a fixed seed.
inline std::vector<int32_t> randomIds(int64_t n, int64_t vocab,
                                      uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0,
                                              static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto &i : ids)
    i = dist(gen);
  return ids;
}

/// n uniform floats in [lo, hi) from a fixed seed.
inline std::vector<float> randomVector(int64_t n, uint32_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto &x : v)
    x = dist(gen);
  return v;
}

/// sum_i w[i] * y[i] in double: a scalar loss whose gradient w.r.t. y is w.
inline double weightedSum(const std::vector<float> &y,
                          const std::vector<float> &w) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i)
    s += static_cast<double>(y[i]) * w[i];
  return s;
}

/// Expects |a - b| <= atol + rtol * max(|a|, |b|) element-wise.
inline void expectClose(const std::vector<float> &a,
                        const std::vector<float> &b, double rtol, double atol,
                        const std::string &what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < a.size() && failures < 5; ++i) {
    double tol = atol + rtol * std::max(std::fabs(a[i]), std::fabs(b[i]));
    if (!(std::fabs(static_cast<double>(a[i]) - b[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs " << b[i];
      ++failures;
    }
  }
}

/// Compares analytic grad[i] with (loss(x+h) - loss(x-h)) / 2h for up to
/// `maxChecks` indices of x (evenly spread). `loss` must read x.
inline void expectGradientMatches(const std::function<double()> &loss,
                                  std::vector<float> &x,
                                  const std::vector<float> &grad,
                                  const std::string &what, float h = 1e-3f,
                                  double rtol = 1e-2, double atol = 1e-3,
                                  int64_t maxChecks = 96) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t stride = std::max<int64_t>(1, n / maxChecks);
  int failures = 0;
  for (int64_t i = 0; i < n && failures < 5; i += stride) {
    const float orig = x[i];
    const float xp = orig + h, xm = orig - h;
    x[i] = xp;
    const double lp = loss();
    x[i] = xm;
    const double lm = loss();
    x[i] = orig;
    // Divide by the perturbation actually applied after float rounding.
    const double fd = (lp - lm) / (static_cast<double>(xp) - xm);
    const double tol =
        atol + rtol * std::max(std::fabs(fd), std::fabs(double(grad[i])));
    if (!(std::fabs(fd - grad[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << grad[i]
                    << " vs finite difference " << fd;
      ++failures;
    }
  }
}

} // namespace loom::test

#endif // LOOM_TEST_RUNTIME_TESTUTIL_H
