// Timing candidates against each other, the way search measures kernels:
// warm-up, then interleaved rounds (A B C, B C A, ...: a slow spell of the
// machine hits every candidate alike), the median of each candidate's
// samples and a distribution-free confidence interval of that median, and
// rounds until the best's interval separates from every other's or the
// budget ends.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flowc {

struct MeasureOptions {
  /// Wall-clock seconds for the whole measurement, warm-up included; 0: no
  /// limit but maxRounds.
  double budgetSeconds = 0;
  /// Untimed runs of each candidate first (caches, page faults, lazy
  /// initialisation).
  int warmupRounds = 2;
  /// Rounds before separation may end the measurement.
  int minRounds = 7;
  int maxRounds = 200;
  /// A file locked (flock, exclusive) from the first warm-up run to the last
  /// sample: measurements of processes sharing it never overlap, while
  /// their other work (compiling candidates) does. Empty: none.
  std::string lockPath;
};

struct CandidateTiming {
  std::string candidate;
  int64_t medianNs = 0;
  /// The 95% confidence interval of the median (order statistics).
  int64_t lowNs = 0;
  int64_t highNs = 0;
  int samples = 0;
  /// Left out of later rounds once separated from the best (slower).
  bool dropped = false;
};

struct Measurement {
  /// In the candidates' order.
  std::vector<CandidateTiming> timings;
  /// Index of the fastest median.
  size_t best = 0;
  /// The best's interval lies below every other candidate's.
  bool separated = false;
  /// The budget ended the measurement before separation or maxRounds.
  bool budgetEnded = false;
  int rounds = 0;
  double seconds = 0;
  /// The measurement's noise: the median over candidates of the interval's
  /// width relative to the median time.
  double noise() const;
  /// Half the best's interval, in nanoseconds: the spread recorded with it.
  int64_t bestSpreadNs() const;
};

/// Times `runs[i]` (named `names[i]`) against each other as the header
/// says. Every run must compute the same thing; the caller owns pinning.
/// With one candidate, times it for minRounds. A lock that cannot be taken
/// is logged and the measurement goes on without it.
Measurement measureInterleaved(const std::vector<std::string> &names,
                               const std::vector<std::function<void()>> &runs,
                               const MeasureOptions &options);

/// The ranks (0-based, into the sorted samples) bounding a 95% confidence
/// interval of the median of `n` samples.
std::pair<int, int> medianIntervalRanks(int n);

} // namespace flowc
