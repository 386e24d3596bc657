// The integer matrix product (KernelKind::IntegerMatMul) against sums of
// products in int64: every pairing of int8 and uint8, zero points absent,
// one, or one per column, B constant or not, and B or the zero points
// changing between calls. ctest runs these tests twice: as the CPU is, and
// with DNNL_MAX_CPU_ISA=AVX2 (no VNNI), where the product runs in float32.
#include "Kernels.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace flowc::runtime {
namespace {

struct Operands {
  IntegerMatMulParams params;
  std::vector<uint8_t> a, b, zeroA, zerosB;
};

int64_t valueOf(uint8_t byte, bool isUnsigned) {
  return isUnsigned ? byte : static_cast<int8_t>(byte);
}

Operands randomOperands(std::mt19937 &random, int64_t m, int64_t n, int64_t k,
                        bool unsignedA, bool unsignedB, bool zeroA, int64_t zerosB) {
  std::uniform_int_distribution<int> byte(0, 255);
  auto bytes = [&](int64_t count) {
    std::vector<uint8_t> out(static_cast<size_t>(count));
    for (uint8_t &value : out)
      value = static_cast<uint8_t>(byte(random));
    return out;
  };
  return Operands{{m, n, k, 0, 1, unsignedA, unsignedB, zeroA, zerosB},
                  bytes(m * k),
                  bytes(k * n),
                  bytes(zeroA ? 1 : 0),
                  bytes(zerosB)};
}

std::vector<int32_t> expectedProduct(const Operands &o) {
  const IntegerMatMulParams &p = o.params;
  int64_t za = p.hasZeroA ? valueOf(o.zeroA[0], p.unsignedA) : 0;
  std::vector<int32_t> out;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      int64_t zb = p.zerosB ? valueOf(o.zerosB[p.zerosB == 1 ? 0 : j], p.unsignedB) : 0;
      int64_t sum = 0;
      for (int64_t t = 0; t < p.k; ++t)
        sum +=
            (valueOf(o.a[i * p.k + t], p.unsignedA) - za) *
            (valueOf(o.b[p.transposedB ? j * p.k + t : t * p.n + j], p.unsignedB) - zb);
      out.push_back(static_cast<int32_t>(sum));
    }
  return out;
}

/// One site's kernel, called as generated code calls it.
class Product {
public:
  Product() : context_(makeKernelContext({""})) {}

  std::vector<int32_t> run(Operands &o) {
    std::vector<int32_t> out(static_cast<size_t>(o.params.m * o.params.n), -7);
    std::vector<void *> buffers = {o.a.data(), o.b.data()};
    if (o.params.hasZeroA)
      buffers.push_back(o.zeroA.data());
    if (o.params.zerosB)
      buffers.push_back(o.zerosB.data());
    buffers.push_back(out.data());
    std::vector<int64_t> words = paramWords(o.params);
    kernelFunction(KernelKind::IntegerMatMul)(context_.get(), 0, words.data(),
                                              buffers.data());
    Status failure = takeKernelFailure(*context_);
    EXPECT_TRUE(failure.isOk()) << failure.message();
    return out;
  }

  bool runsInFloat() const {
    return siteImplementation(*context_, 0).find("float32") != std::string::npos;
  }

private:
  KernelContextPtr context_;
};

TEST(IntegerMatMulTest, EveryPairingOfSignsAndZeroPointsIsExact) {
  std::mt19937 random(3);
  // k = 200: sums stay under 2^24, exact in float32 too.
  for (bool unsignedA : {true, false})
    for (bool unsignedB : {true, false})
      for (bool zeroA : {false, true})
        for (int64_t zerosB : {0, 1, 24})
          for (bool constantB : {true, false}) {
            Operands o =
                randomOperands(random, 5, 24, 200, unsignedA, unsignedB, zeroA, zerosB);
            o.params.constantB = constantB;
            Product product;
            EXPECT_EQ(product.run(o), expectedProduct(o))
                << "A " << (unsignedA ? "u8" : "s8") << ", B "
                << (unsignedB ? "u8" : "s8") << ", zero A " << zeroA << ", zeros B "
                << zerosB << ", constant B " << constantB;
          }
}

TEST(IntegerMatMulTest, ATransposedBIsReadAsStored) {
  std::mt19937 random(21);
  for (bool constantB : {true, false})
    for (bool unsignedB : {true, false}) {
      Operands o = randomOperands(random, 3, 10, 40, true, unsignedB, true, 10);
      o.params.transposedB = 1;
      o.params.constantB = constantB;
      Product product;
      EXPECT_EQ(product.run(o), expectedProduct(o))
          << "constant " << constantB << ", unsigned " << unsignedB;
    }
}

TEST(IntegerMatMulTest, ExtremeBytesAndOddShapes) {
  for (int64_t m : {1, 3, 64})
    for (int64_t n : {1, 17})
      for (int64_t k : {1, 7, 130}) {
        Operands o{{m, n, k, 0, 0, 1, 0, 1, n}, {}, {}, {0}, {}};
        // A all 255, B all -128, zero points at the other extreme.
        o.a.assign(static_cast<size_t>(m * k), 255);
        o.b.assign(static_cast<size_t>(k * n), 0x80);
        o.zerosB.assign(static_cast<size_t>(n), 0x7f);
        Product product;
        EXPECT_EQ(product.run(o), expectedProduct(o)) << m << "x" << k << "x" << n;
      }
}

TEST(IntegerMatMulTest, AConstantBIsConvertedAgainOnlyFromAnotherBuffer) {
  std::mt19937 random(5);
  Operands first = randomOperands(random, 4, 16, 64, true, true, true, 16);
  Operands second = randomOperands(random, 4, 16, 64, true, true, true, 16);
  Product product;
  EXPECT_EQ(product.run(first), expectedProduct(first));
  // Another B buffer (the same params): converted anew.
  EXPECT_EQ(product.run(second), expectedProduct(second));
  // The same B buffer with other zero points and another A: run-time
  // values, read each call.
  Operands third = randomOperands(random, 4, 16, 64, true, true, true, 16);
  third.b = second.b;
  second.a = third.a;
  second.zeroA = third.zeroA;
  second.zerosB = third.zerosB;
  EXPECT_EQ(product.run(second), expectedProduct(second));
}

TEST(IntegerMatMulTest, ARunTimeBIsReadEachCall) {
  std::mt19937 random(9);
  Operands o = randomOperands(random, 3, 8, 32, false, true, true, 1);
  o.params.constantB = 0;
  Product product;
  EXPECT_EQ(product.run(o), expectedProduct(o));
  // New contents at the same address.
  for (uint8_t &value : o.b)
    value = static_cast<uint8_t>(value * 7 + 1);
  EXPECT_EQ(product.run(o), expectedProduct(o));
}

TEST(IntegerMatMulTest, LongSumsAreExactInInt8) {
  std::mt19937 random(11);
  // 255 * 255 * 1024 is past 2^24: float32 sums would round.
  Operands o = randomOperands(random, 2, 8, 1024, true, false, true, 0);
  o.a.assign(o.a.size(), 255);
  o.zeroA = {0};
  for (size_t i = 0; i < o.b.size(); ++i)
    o.b[i] = static_cast<uint8_t>(i % 2 ? 0x81 : 0x7f);
  Product product;
  std::vector<int32_t> got = product.run(o);
  if (product.runsInFloat())
    GTEST_SKIP() << "this CPU (or DNNL_MAX_CPU_ISA) has no VNNI: the product runs in "
                    "float32, exact below 2^24";
  EXPECT_EQ(got, expectedProduct(o));
}

TEST(IntegerMatMulTest, RunsInFloat32WithoutVnni) {
  const char *isa = std::getenv("DNNL_MAX_CPU_ISA");
  if (!isa || std::string(isa) != "AVX2")
    GTEST_SKIP() << "runs where ctest sets DNNL_MAX_CPU_ISA=AVX2";
  std::mt19937 random(13);
  Operands o = randomOperands(random, 2, 4, 8, true, false, false, 0);
  Product product;
  EXPECT_EQ(product.run(o), expectedProduct(o));
  EXPECT_TRUE(product.runsInFloat());
}

} // namespace
} // namespace flowc::runtime
