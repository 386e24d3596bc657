// How `flowc submit` shows a job's events (docs/progress.md): text lines on
// stderr (--progress), NDJSON on stdout (--progress=json), or one line that
// redraws in place when stderr is a terminal.
#pragma once

#include "flowc/v1/flowc.pb.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace flowc::cli {

enum class ProgressMode {
  None,     ///< Only what was asked for regardless (IR text).
  Text,     ///< "flowc: [1.234s] stage: detail" lines on stderr.
  Json,     ///< One JSON event per line on stdout, flushed per line.
  Terminal, ///< One line on stderr redrawn in place (\r, clear to end).
};

/// The mode for the options given: --progress=json wins; then --progress
/// (text); then, with no --json, a terminal on stderr gets the redrawn line.
ProgressMode chooseProgressMode(const std::string &progress, bool json,
                                bool stderrIsTerminal);

/// Renders one submit's events. Thread-safe: the reader thread feeds it
/// while a ticker may redraw the terminal line.
class ProgressRenderer {
public:
  /// `started`: when the command began (every "elapsed" counts from it).
  /// `columns`: the terminal's width (Terminal mode truncates to it).
  ProgressRenderer(ProgressMode mode, std::chrono::steady_clock::time_point started,
                   std::ostream &out, std::ostream &err, unsigned columns = 80);

  /// Shows one event of the stream (never the result).
  void event(const flowc::v1::SubmitEvent &event);
  /// Redraws the terminal line (its elapsed time) when one is shown.
  void tick();
  /// Ends the terminal line, so that what follows starts on a line of its
  /// own. Idempotent.
  void finish();
  /// The NDJSON form of one event (Json mode), for tests and the docs.
  nlohmann::json eventJson(const flowc::v1::SubmitEvent &event);

  /// The terminal line for the state so far (Terminal mode), without the
  /// \r and clear: bar, kernels i/n, phase, elapsed, ETA, pass or kernel.
  std::string statusLine() const;

private:
  double elapsed() const;
  void remember(const flowc::v1::Progress &progress);
  void drawLocked();
  void finishLocked();

  ProgressMode mode_;
  std::chrono::steady_clock::time_point started_;
  std::ostream &out_;
  std::ostream &err_;
  unsigned columns_;
  std::mutex mutex_;
  bool lineOpen_ = false;
  // What the terminal line shows; the counters "so far" carry over events
  // that do not have them (a task process's passes).
  std::string phase_, pass_, kernel_;
  unsigned kernelIndex_ = 0, kernelCount_ = 0;
  double eta_ = -1;
  std::map<std::string, std::pair<uint64_t, uint64_t>> cache_;
  uint64_t bytesHashed_ = 0;
};

} // namespace flowc::cli
