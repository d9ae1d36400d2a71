//===- ElementwiseTest.cpp - Add / broadcast add / scale --------*- C++ -*-===//
#include "runtime/cpu/elementwise.h"

#include "TestUtil.h"

using namespace loom;
using namespace loom::test;

namespace {

TEST(Elementwise, AddAccumulateScale) {
  auto a = randomVector(100, 1), b = randomVector(100, 2);
  std::vector<float> out(100);
  cpu::add(out.data(), a.data(), b.data(), 100);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(out[i], a[i] + b[i]);
  cpu::accumulate(out.data(), a.data(), 100);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(out[i], (a[i] + b[i]) + a[i]);
  cpu::scale(out.data(), a.data(), -2.0f, 100);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(out[i], -2.0f * a[i]);
}

TEST(Elementwise, BroadcastAddMatchesReference) {
  // [B, T, C] + [T, C]: outer = B, inner = T*C.
  const int64_t B = 3, T = 5, C = 70;
  auto a = randomVector(B * T * C, 3), b = randomVector(T * C, 4);
  std::vector<float> out(a.size()), ref(a.size());
  cpu::addBroadcast(out.data(), a.data(), b.data(), B, T * C);
  cpu::addBroadcastReference(ref.data(), a.data(), b.data(), B, T * C);
  EXPECT_EQ(out, ref);
  EXPECT_EQ(out[2 * T * C + 7], a[2 * T * C + 7] + b[7]);
}

TEST(Elementwise, BroadcastBackwardMatchesReferenceAndFiniteDifferences) {
  const int64_t B = 4, inner = 300;
  auto dout = randomVector(B * inner, 5);
  auto db = randomVector(inner, 6);
  auto dbRef = db;
  cpu::addBroadcastBackward(db.data(), dout.data(), B, inner, true);
  cpu::addBroadcastBackwardReference(dbRef.data(), dout.data(), B, inner, true);
  expectClose(db, dbRef, 1e-5, 1e-6, "accumulated db");
  cpu::addBroadcastBackward(db.data(), dout.data(), B, inner, false);
  cpu::addBroadcastBackwardReference(dbRef.data(), dout.data(), B, inner,
                                     false);
  expectClose(db, dbRef, 1e-5, 1e-6, "overwritten db");

  auto a = randomVector(B * inner, 7), b = randomVector(inner, 8);
  std::vector<float> out(a.size());
  auto loss = [&]() {
    cpu::addBroadcast(out.data(), a.data(), b.data(), B, inner);
    return weightedSum(out, dout);
  };
  expectGradientMatches(loss, b, db, "broadcast add db");
  expectGradientMatches(loss, a, dout, "broadcast add da = dout");
}

} // namespace
