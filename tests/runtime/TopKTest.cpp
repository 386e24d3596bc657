// TopK's CPU kernel (runtime/lib/TopK.h) against a full sort of each row:
// ties by index, NaN as +infinity, every key type, and rows enough for
// the parallel path.
#include "TopK.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace flowc::runtime {
namespace {

template <typename Key> Key rankOf(Key key) {
  if constexpr (std::is_floating_point_v<Key>)
    return std::isnan(key) ? std::numeric_limits<Key>::infinity() : key;
  return key;
}

/// Each row sorted whole, equal keys by index: the first k of each.
template <typename Key>
std::vector<int32_t> sortedOrder(const std::vector<Key> &keys, int64_t rows, int64_t n,
                                 int64_t k, bool largest) {
  std::vector<int32_t> order;
  for (int64_t row = 0; row < rows; ++row) {
    const Key *line = keys.data() + row * n;
    std::vector<int32_t> indices(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), 0);
    std::stable_sort(indices.begin(), indices.end(), [&](int32_t a, int32_t b) {
      Key x = rankOf(line[a]), y = rankOf(line[b]);
      return largest ? x > y : x < y;
    });
    order.insert(order.end(), indices.begin(), indices.begin() + k);
  }
  return order;
}

template <typename Key>
std::vector<int32_t> kernelOrder(const std::vector<Key> &keys, int64_t rows, int64_t n,
                                 int64_t k, bool largest, KeyType type) {
  std::vector<int32_t> order(static_cast<size_t>(rows * k), -1);
  topKRows(TopKParams{rows, n, k, largest, type}, keys.data(), order.data());
  return order;
}

TEST(TopKTest, FloatRowsMatchAFullSortWithTiesByIndex) {
  std::mt19937 random(7);
  // Few distinct values: most keys tie with others.
  std::uniform_int_distribution<int> value(-20, 20);
  for (int64_t n : {1, 7, 100, 1000, 5000})
    for (int64_t k : {int64_t{1}, std::min<int64_t>(5, n), std::min<int64_t>(64, n), n})
      for (bool largest : {true, false}) {
        int64_t rows = 3;
        std::vector<float> keys(static_cast<size_t>(rows * n));
        for (float &key : keys)
          key = static_cast<float>(value(random)) * 0.5f;
        EXPECT_EQ(kernelOrder(keys, rows, n, k, largest, KeyType::F32),
                  sortedOrder(keys, rows, n, k, largest))
            << "n " << n << " k " << k << " largest " << largest;
      }
}

TEST(TopKTest, AscendingAndDescendingRowsDisplaceEveryCandidate) {
  // A row sorted against the wanted order makes each key beat the bar.
  for (bool largest : {true, false}) {
    std::vector<float> keys(3000);
    std::iota(keys.begin(), keys.end(), 0.0f);
    if (!largest)
      std::reverse(keys.begin(), keys.end());
    EXPECT_EQ(kernelOrder(keys, 1, 3000, 100, largest, KeyType::F32),
              sortedOrder(keys, 1, 3000, 100, largest));
  }
}

TEST(TopKTest, NanRanksAsInfinity) {
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> keys = {1.0f, nan, -inf, inf, 2.0f, nan, -1.0f, inf};
  // Largest: NaN and +inf tie, by index: 1, 3, 5, 7, then 2.0 at 4.
  EXPECT_EQ(kernelOrder(keys, 1, 8, 5, true, KeyType::F32),
            (std::vector<int32_t>{1, 3, 5, 7, 4}));
  // Smallest: NaN comes last, after +inf at the same rank by index.
  EXPECT_EQ(kernelOrder(keys, 1, 8, 8, false, KeyType::F32),
            (std::vector<int32_t>{2, 6, 0, 4, 1, 3, 5, 7}));
}

TEST(TopKTest, IntegerKeysKeepTheirExtremes) {
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> wide = {0, hi, lo, hi - 1, lo + 1, hi, 5};
  EXPECT_EQ(kernelOrder(wide, 1, 7, 3, true, KeyType::I64),
            (std::vector<int32_t>{1, 5, 3}));
  EXPECT_EQ(kernelOrder(wide, 1, 7, 3, false, KeyType::I64),
            (std::vector<int32_t>{2, 4, 0}));
  std::mt19937 random(3);
  std::uniform_int_distribution<int32_t> value(-3, 3);
  std::vector<int32_t> narrow(4 * 500);
  for (int32_t &key : narrow)
    key = value(random);
  for (bool largest : {true, false})
    EXPECT_EQ(kernelOrder(narrow, 4, 500, 37, largest, KeyType::I32),
              sortedOrder(narrow, 4, 500, 37, largest));
}

TEST(TopKTest, ManyRowsTakeTheParallelPathAndAgree) {
  std::mt19937 random(11);
  std::normal_distribution<float> value;
  int64_t rows = 64, n = 4096, k = 50;
  std::vector<float> keys(static_cast<size_t>(rows * n));
  for (float &key : keys)
    key = value(random);
  EXPECT_EQ(kernelOrder(keys, rows, n, k, true, KeyType::F32),
            sortedOrder(keys, rows, n, k, true));
}

} // namespace
} // namespace flowc::runtime
