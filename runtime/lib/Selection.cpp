#include "Selection.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

// Sanitized builds (the fuzz targets) instrument every load, which keeps
// a loop scalar: asking for SIMD there only draws clang's warning.
#if defined(__SANITIZE_ADDRESS__)
#define FLOWC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLOWC_SANITIZED 1
#endif
#endif
#ifndef FLOWC_SANITIZED
#define FLOWC_SANITIZED 0
#endif

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

/// Keys a TopK row reads between two looks at its bar.
constexpr int64_t kBlock = 64;

/// Whether any of `count` keys may rank strictly before `bar`. A NaN
/// (+infinity to the exact test) passes when the largest are kept: a
/// false positive only sends the block to the exact loop.
template <bool Largest, typename Key>
bool anyBeats(const Key *keys, int64_t count, Key bar) {
  int beats = 0;
#if !FLOWC_SANITIZED
#pragma omp simd reduction(| : beats)
#endif
  for (int64_t i = 0; i < count; ++i) {
    Key key = keys[i];
    if constexpr (Largest)
      beats |= (key > bar) | (key != key);
    else
      beats |= key < bar;
  }
  return beats != 0;
}

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
  for (int64_t start = 0; start < n; start += kBlock) {
    int64_t end = std::min(n, start + kBlock);
    // Once the bar is set, a block that nothing in it beats costs one
    // vectorized pass.
    if (barred && !anyBeats<Largest>(keys + start, end - start, bar))
      continue;
    for (int64_t i = start; i < end; ++i) {
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

/// The type T's arithmetic wraps in: its unsigned twin for integers.
template <typename T, bool = std::is_integral_v<T>> struct WrappingOf { using type = T; };
template <typename T> struct WrappingOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T> using Wrapping = typename WrappingOf<T>::type;

/// `row` met by `update` as `reduction` says. Integers wrap, as TOSA's
/// do; a float NaN wins a maximum or minimum, as TOSA's propagating ones.
template <typename T> T combined(ScatterReduction reduction, T row, T update) {
  if constexpr (std::is_floating_point_v<T>) {
    if ((reduction == ScatterReduction::Max || reduction == ScatterReduction::Min) &&
        (std::isnan(row) || std::isnan(update)))
      return std::numeric_limits<T>::quiet_NaN();
  }
  switch (reduction) {
  case ScatterReduction::Add:
    return static_cast<T>(static_cast<Wrapping<T>>(row) +
                          static_cast<Wrapping<T>>(update));
  case ScatterReduction::Mul:
    return static_cast<T>(static_cast<Wrapping<T>>(row) *
                          static_cast<Wrapping<T>>(update));
  case ScatterReduction::Max:
    return std::max(row, update);
  case ScatterReduction::Min:
    return std::min(row, update);
  case ScatterReduction::None:
    break;
  }
  return update;
}

/// The updates, one after another: a later one to the same row meets the
/// result of the earlier ones.
template <typename T>
void applyUpdates(const ScatterRowsParams &p, const T *updates, const int32_t *targets,
                  T *destination) {
  size_t width = static_cast<size_t>(p.width);
  for (int64_t j = 0; j < p.count; ++j) {
    int64_t row = targets[j];
    if (row < 0 || row >= p.rows)
      continue;
    T *line = destination + row * p.width;
    const T *update = updates + j * p.width;
    if (p.reduction == ScatterReduction::None) {
      std::memcpy(line, update, width * sizeof(T));
      continue;
    }
    for (size_t c = 0; c < width; ++c)
      line[c] = combined(p.reduction, line[c], update[c]);
  }
}

/// memcpy, in chunks over the threads once it is large enough for them to
/// pay (a KV cache is megabytes).
void copyBytes(void *to, const void *from, size_t bytes) {
  constexpr size_t kChunk = size_t{256} << 10;
  int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for if (chunks > 4) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    size_t at = static_cast<size_t>(c) * kChunk;
    std::memcpy(static_cast<char *>(to) + at, static_cast<const char *>(from) + at,
                std::min(kChunk, bytes - at));
  }
}

template <typename T>
void scatterTyped(const ScatterRowsParams &p, const void *data, const void *updates,
                  const int32_t *targets, void *destination) {
  copyBytes(destination, data, static_cast<size_t>(p.rows * p.width) * sizeof(T));
  applyUpdates(p, static_cast<const T *>(updates), targets,
               static_cast<T *>(destination));
}

} // namespace

void scatterRows(const ScatterRowsParams &params, const void *data, const void *updates,
                 const int32_t *targets, void *destination) {
  switch (params.type) {
  case ScalarType::F32:
    return scatterTyped<float>(params, data, updates, targets, destination);
  case ScalarType::I32:
    return scatterTyped<int32_t>(params, data, updates, targets, destination);
  case ScalarType::I64:
    return scatterTyped<int64_t>(params, data, updates, targets, destination);
  }
}

void topKRows(const TopKParams &params, const void *keys, int32_t *indices) {
  if (params.k <= 0 || params.k > params.n)
    return;
  switch (params.keyType) {
  case ScalarType::F32:
    return topKOf<float>(params, keys, indices);
  case ScalarType::I32:
    return topKOf<int32_t>(params, keys, indices);
  case ScalarType::I64:
    return topKOf<int64_t>(params, keys, indices);
  }
}

} // namespace flowc::runtime
