#include "flowc/support/Measure.h"

#include "flowc/support/MachineLock.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace flowc {

namespace {

using Clock = std::chrono::steady_clock;

/// One candidate's samples so far.
struct Series {
  std::vector<int64_t> samples;
  bool dropped = false;
};

CandidateTiming summarize(const std::string &name, const Series &series) {
  CandidateTiming timing;
  timing.candidate = name;
  timing.dropped = series.dropped;
  timing.samples = static_cast<int>(series.samples.size());
  if (series.samples.empty())
    return timing;
  std::vector<int64_t> sorted = series.samples;
  std::sort(sorted.begin(), sorted.end());
  size_t n = sorted.size();
  timing.medianNs = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  auto [low, high] = medianIntervalRanks(static_cast<int>(n));
  timing.lowNs = sorted[low];
  timing.highNs = sorted[high];
  return timing;
}

size_t fastest(const std::vector<CandidateTiming> &timings) {
  size_t best = 0;
  for (size_t i = 1; i < timings.size(); ++i)
    if (timings[i].medianNs < timings[best].medianNs)
      best = i;
  return best;
}

int64_t runOnce(const std::function<void()> &run) {
  auto start = Clock::now();
  run();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start)
      .count();
}

} // namespace

std::pair<int, int> medianIntervalRanks(int n) {
  if (n <= 0)
    return {0, 0};
  // The median's rank is binomial(n, 1/2): within n/2 +- 1.96 sqrt(n)/2 with
  // 95% probability, whatever the distribution of the times.
  double half = 0.98 * std::sqrt(static_cast<double>(n));
  int low = static_cast<int>(std::floor(n / 2.0 - half)) - 1;
  int high = static_cast<int>(std::ceil(n / 2.0 + half));
  return {std::clamp(low, 0, n - 1), std::clamp(high, 0, n - 1)};
}

double Measurement::noise() const {
  std::vector<double> widths;
  for (const CandidateTiming &timing : timings)
    if (timing.medianNs > 0)
      widths.push_back(static_cast<double>(timing.highNs - timing.lowNs) /
                       static_cast<double>(timing.medianNs));
  if (widths.empty())
    return 0;
  std::nth_element(widths.begin(), widths.begin() + widths.size() / 2, widths.end());
  return widths[widths.size() / 2];
}

int64_t Measurement::bestSpreadNs() const {
  if (timings.empty())
    return 0;
  return (timings[best].highNs - timings[best].lowNs) / 2;
}

Measurement measureInterleaved(const std::vector<std::string> &names,
                               const std::vector<std::function<void()>> &runs,
                               const MeasureOptions &options) {
  ExclusiveMachineLock lock(options.lockPath);
  auto start = Clock::now();
  auto overBudget = [&] {
    return options.budgetSeconds > 0 &&
           std::chrono::duration<double>(Clock::now() - start).count() >=
               options.budgetSeconds;
  };
  Measurement measurement;
  std::vector<Series> series(runs.size());
  for (int round = 0; round < options.warmupRounds && !overBudget(); ++round)
    for (const std::function<void()> &run : runs)
      run();
  auto summarizeAll = [&] {
    measurement.timings.clear();
    for (size_t i = 0; i < runs.size(); ++i)
      measurement.timings.push_back(summarize(names[i], series[i]));
    measurement.best = fastest(measurement.timings);
  };
  int rounds = 0;
  for (; rounds < options.maxRounds; ++rounds) {
    if (rounds > 0 && overBudget()) {
      measurement.budgetEnded = true;
      break;
    }
    // Rotated order: no candidate always runs first (or right after
    // another one's cache footprint).
    for (size_t k = 0; k < runs.size(); ++k) {
      size_t i = (k + static_cast<size_t>(rounds)) % runs.size();
      if (!series[i].dropped)
        series[i].samples.push_back(runOnce(runs[i]));
    }
    if (rounds + 1 < options.minRounds)
      continue;
    summarizeAll();
    const CandidateTiming &best = measurement.timings[measurement.best];
    bool separated = true;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (i == measurement.best)
        continue;
      // Slower beyond doubt: no more rounds for it.
      if (measurement.timings[i].lowNs > best.highNs)
        series[i].dropped = true;
      else
        separated = false;
    }
    if (separated) {
      measurement.separated = runs.size() > 1;
      ++rounds;
      break;
    }
  }
  summarizeAll();
  measurement.rounds = rounds;
  measurement.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return measurement;
}

} // namespace flowc
