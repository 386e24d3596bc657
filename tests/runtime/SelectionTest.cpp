// flowc's own CPU kernels (runtime/lib/Selection.h). TopK against a full
// sort of each row: ties by index, NaN as +infinity, every key type, and
// rows enough for the parallel path. The row scatter against updates
// applied one at a time: every reduction, repeated and skipped targets,
// integer wrap-around, and a copy large enough to be split over threads.
#include "Selection.h"

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
                                 int64_t k, bool largest, ScalarType type) {
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
        EXPECT_EQ(kernelOrder(keys, rows, n, k, largest, ScalarType::F32),
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
    EXPECT_EQ(kernelOrder(keys, 1, 3000, 100, largest, ScalarType::F32),
              sortedOrder(keys, 1, 3000, 100, largest));
  }
}

TEST(TopKTest, NanRanksAsInfinity) {
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> keys = {1.0f, nan, -inf, inf, 2.0f, nan, -1.0f, inf};
  // Largest: NaN and +inf tie, by index: 1, 3, 5, 7, then 2.0 at 4.
  EXPECT_EQ(kernelOrder(keys, 1, 8, 5, true, ScalarType::F32),
            (std::vector<int32_t>{1, 3, 5, 7, 4}));
  // Smallest: NaN comes last, after +inf at the same rank by index.
  EXPECT_EQ(kernelOrder(keys, 1, 8, 8, false, ScalarType::F32),
            (std::vector<int32_t>{2, 6, 0, 4, 1, 3, 5, 7}));
}

TEST(TopKTest, IntegerKeysKeepTheirExtremes) {
  int64_t lo = std::numeric_limits<int64_t>::min(),
          hi = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> wide = {0, hi, lo, hi - 1, lo + 1, hi, 5};
  EXPECT_EQ(kernelOrder(wide, 1, 7, 3, true, ScalarType::I64),
            (std::vector<int32_t>{1, 5, 3}));
  EXPECT_EQ(kernelOrder(wide, 1, 7, 3, false, ScalarType::I64),
            (std::vector<int32_t>{2, 4, 0}));
  std::mt19937 random(3);
  std::uniform_int_distribution<int32_t> value(-3, 3);
  std::vector<int32_t> narrow(4 * 500);
  for (int32_t &key : narrow)
    key = value(random);
  for (bool largest : {true, false})
    EXPECT_EQ(kernelOrder(narrow, 4, 500, 37, largest, ScalarType::I32),
              sortedOrder(narrow, 4, 500, 37, largest));
}

TEST(TopKTest, ManyRowsTakeTheParallelPathAndAgree) {
  std::mt19937 random(11);
  std::normal_distribution<float> value;
  int64_t rows = 64, n = 4096, k = 50;
  std::vector<float> keys(static_cast<size_t>(rows * n));
  for (float &key : keys)
    key = value(random);
  EXPECT_EQ(kernelOrder(keys, rows, n, k, true, ScalarType::F32),
            sortedOrder(keys, rows, n, k, true));
}

template <typename T>
std::vector<T> scattered(const std::vector<T> &data, const std::vector<T> &updates,
                         const std::vector<int32_t> &targets, int64_t width,
                         ScatterReduction reduction, ScalarType type) {
  std::vector<T> out(data.size());
  ScatterRowsParams p{static_cast<int64_t>(data.size()) / width, width,
                      static_cast<int64_t>(targets.size()), reduction, type};
  scatterRows(p, data.data(), updates.data(), targets.data(), out.data());
  return out;
}

TEST(ScatterRowsTest, LaterUpdatesToARowReplaceOrCombineInOrder) {
  std::vector<float> data = {1, 2, 3, 4, 5, 6}; // 3 rows of 2
  std::vector<float> updates = {10, 20, 30, 40, 50, 60};
  std::vector<int32_t> targets = {2, 0, 2};
  EXPECT_EQ(scattered(data, updates, targets, 2, ScatterReduction::None, ScalarType::F32),
            (std::vector<float>{30, 40, 3, 4, 50, 60}));
  EXPECT_EQ(scattered(data, updates, targets, 2, ScatterReduction::Add, ScalarType::F32),
            (std::vector<float>{31, 42, 3, 4, 65, 86}));
  EXPECT_EQ(scattered(data, updates, targets, 2, ScatterReduction::Mul, ScalarType::F32),
            (std::vector<float>{30, 80, 3, 4, 2500, 7200}));
  std::vector<float> mixed = {0, 9, -1, 7, 8, -5};
  EXPECT_EQ(scattered(data, mixed, targets, 2, ScatterReduction::Max, ScalarType::F32),
            (std::vector<float>{1, 7, 3, 4, 8, 9}));
  EXPECT_EQ(scattered(data, mixed, targets, 2, ScatterReduction::Min, ScalarType::F32),
            (std::vector<float>{-1, 2, 3, 4, 0, -5}));
}

TEST(ScatterRowsTest, NanWinsAMaximumOrMinimum) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  for (ScatterReduction reduction : {ScatterReduction::Max, ScatterReduction::Min}) {
    std::vector<float> out =
        scattered<float>({nan, 1.0f}, {5.0f, nan}, {0}, 2, reduction, ScalarType::F32);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  }
}

TEST(ScatterRowsTest, TargetsOutsideTheRowsAreSkipped) {
  // The graph's own check fails such a run; the kernel must only not
  // write outside its buffer.
  std::vector<int32_t> targets = {-1, 3, 1, 100000};
  EXPECT_EQ(scattered<int32_t>({1, 2, 3}, {7, 8, 9, 10}, targets, 1,
                               ScatterReduction::None, ScalarType::I32),
            (std::vector<int32_t>{1, 9, 3}));
}

TEST(ScatterRowsTest, IntegersWrapAsTosaDoes) {
  int64_t hi = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(scattered<int64_t>({hi, 3}, {1, hi}, {0, 1}, 1, ScatterReduction::Add,
                               ScalarType::I64),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::min() + 2}));
  int32_t big = 1 << 20;
  EXPECT_EQ(
      scattered<int32_t>({big}, {big}, {0}, 1, ScatterReduction::Mul, ScalarType::I32),
      (std::vector<int32_t>{0}));
}

TEST(ScatterRowsTest, AKvCacheSizedCopyKeepsEveryRowItIsNotGiven) {
  // [12 * 1024, 64]: 3 MiB, copied in chunks over the threads.
  int64_t rows = 12 * 1024, width = 64;
  std::vector<float> data(static_cast<size_t>(rows * width));
  std::iota(data.begin(), data.end(), 0.0f);
  std::vector<int32_t> targets;
  for (int32_t head = 0; head < 12; ++head)
    targets.push_back(head * 1024 + 700);
  std::vector<float> updates(targets.size() * static_cast<size_t>(width), -1.0f);
  std::vector<float> expected = data;
  for (int32_t row : targets)
    std::fill_n(expected.begin() + row * width, width, -1.0f);
  EXPECT_EQ(
      scattered(data, updates, targets, width, ScatterReduction::None, ScalarType::F32),
      expected);
}

} // namespace
} // namespace flowc::runtime
