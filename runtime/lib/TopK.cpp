#include "TopK.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace flowc::runtime {

namespace {

/// A float key ranks NaN as +infinity.
float rankKey(float key) {
  return std::isnan(key) ? std::numeric_limits<float>::infinity() : key;
}
template <typename Key> Key rankKey(Key key) { return key; }

/// A key with its index: the order compares both, so the sort needs no
/// second look at the row.
template <typename Key> struct Entry {
  Key key;
  int32_t index;
};

/// One row's order into `out`. Candidates collect in `buffer`; when it
/// holds 2k, the best k are kept (nth_element) and the worst of them
/// becomes the bar a later key must beat strictly (at an equal key the
/// earlier index ranks first). Past the first few rounds almost every key
/// is one compare against the bar; the end sorts at most 2k entries.
template <typename Key, bool Largest>
void topKRow(const Key *keys, int64_t n, int64_t k, int32_t *out,
             std::vector<Entry<Key>> &buffer) {
  auto before = [](const Entry<Key> &a, const Entry<Key> &b) {
    if (a.key != b.key)
      return Largest ? a.key > b.key : a.key < b.key;
    return a.index < b.index;
  };
  size_t keep = static_cast<size_t>(k);
  size_t capacity = std::max<size_t>(2 * keep, keep + 64);
  buffer.clear();
  buffer.reserve(capacity);
  bool barred = false;
  auto bar = Key();
  for (int64_t i = 0; i < n; ++i) {
    auto key = rankKey(keys[i]);
    if (barred && !(Largest ? key > bar : key < bar))
      continue;
    buffer.push_back({key, static_cast<int32_t>(i)});
    if (buffer.size() < capacity)
      continue;
    std::nth_element(buffer.begin(), buffer.begin() + (keep - 1), buffer.end(), before);
    buffer.resize(keep);
    bar = buffer[keep - 1].key;
    barred = true;
  }
  std::partial_sort(buffer.begin(), buffer.begin() + keep, buffer.end(), before);
  for (size_t p = 0; p < keep; ++p)
    out[p] = buffer[p].index;
}

template <typename Key, bool Largest>
void topKTyped(const TopKParams &p, const Key *keys, int32_t *indices) {
  // A row of a few thousand keys takes microseconds: threads only pay off
  // when there is more work than a fork costs.
  constexpr int64_t kParallelWork = 1 << 12;
  bool parallel = p.rows > 1 && p.rows * p.n >= kParallelWork;
#pragma omp parallel if (parallel)
  {
    std::vector<Entry<Key>> buffer;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < p.rows; ++row)
      topKRow<Key, Largest>(keys + row * p.n, p.n, p.k, indices + row * p.k, buffer);
  }
}

template <typename Key>
void topKOf(const TopKParams &p, const void *keys, int32_t *indices) {
  if (p.largest)
    topKTyped<Key, true>(p, static_cast<const Key *>(keys), indices);
  else
    topKTyped<Key, false>(p, static_cast<const Key *>(keys), indices);
}

} // namespace

void topKRows(const TopKParams &params, const void *keys, int32_t *indices) {
  if (params.k <= 0 || params.k > params.n)
    return;
  switch (params.keyType) {
  case KeyType::F32:
    return topKOf<float>(params, keys, indices);
  case KeyType::I32:
    return topKOf<int32_t>(params, keys, indices);
  case KeyType::I64:
    return topKOf<int64_t>(params, keys, indices);
  }
}

} // namespace flowc::runtime
