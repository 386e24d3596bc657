// How much new measuring a compile's search may do (docs/search.md):
// `--search-budget SECONDS|none|exhaustive`. Tuning records already in the
// cache are used whatever the budget.
#pragma once

#include "flowc/support/Status.h"

#include <string>

namespace flowc {

struct SearchBudget {
  enum class Mode { None, Seconds, Exhaustive };
  Mode mode = Mode::None;
  /// Wall time for all of a compile's measurements, with Mode::Seconds.
  double seconds = 0;

  bool searches() const { return mode != Mode::None; }
  /// "none", "exhaustive", or seconds ("30", "2.5"); InvalidArgument naming
  /// the text otherwise.
  static Expected<SearchBudget> parse(const std::string &text);
  /// The text parse() reads back.
  std::string text() const;
};

/// The largest number of seconds a budget may name.
inline constexpr double kMaxSearchSeconds = 1e6;

} // namespace flowc
