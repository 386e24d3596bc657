#include "Progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace flowc::cli {

namespace {

constexpr unsigned kBarWidth = 20;

/// "12.3 s", "4 min 05 s".
std::string durationText(double seconds) {
  char text[32];
  if (seconds < 60)
    std::snprintf(text, sizeof text, "%.1f s", seconds);
  else
    std::snprintf(text, sizeof text, "%d min %02d s", static_cast<int>(seconds) / 60,
                  static_cast<int>(seconds) % 60);
  return text;
}

/// Stages whose events have a type of their own in NDJSON.
std::string eventType(const std::string &stage) {
  if (stage == "pass" || stage == "kernel")
    return stage;
  return "phase";
}

/// Cuts `text` to `columns` characters (bytes of UTF-8 sequences kept whole).
std::string fitted(std::string text, unsigned columns) {
  size_t width = 0, at = 0;
  for (; at < text.size(); ++at) {
    if ((static_cast<unsigned char>(text[at]) & 0xc0) == 0x80)
      continue;
    if (width == columns)
      break;
    ++width;
  }
  text.resize(at);
  return text;
}

/// Control characters would move the cursor or end the line: a model
/// path or kernel name is shown with them as '?'.
std::string printable(std::string text) {
  for (char &c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '?';
  return text;
}

} // namespace

ProgressMode chooseProgressMode(const std::string &progress, bool json,
                                bool stderrIsTerminal) {
  if (progress == "json")
    return ProgressMode::Json;
  if (progress == "text")
    return ProgressMode::Text;
  if (!json && stderrIsTerminal)
    return ProgressMode::Terminal;
  return ProgressMode::None;
}

ProgressRenderer::ProgressRenderer(ProgressMode mode,
                                   std::chrono::steady_clock::time_point started,
                                   std::ostream &out, std::ostream &err, unsigned columns)
    : mode_(mode), started_(started), out_(out), err_(err),
      columns_(std::max(columns, 20u)) {}

double ProgressRenderer::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_)
      .count();
}

void ProgressRenderer::remember(const flowc::v1::Progress &progress) {
  const std::string &stage = progress.stage();
  if (stage == "pass") {
    pass_ = progress.pass();
  } else if (stage == "kernel") {
    kernel_ = progress.kernel();
    kernelIndex_ = progress.kernel_index();
    kernelCount_ = progress.kernel_count();
    eta_ = progress.eta_seconds();
  } else {
    phase_ = stage;
    if (stage == "codegen")
      kernelCount_ = progress.kernel_count();
  }
  for (const auto &[kind, counts] : progress.cache()) {
    auto &known = cache_[kind];
    known.first = std::max(known.first, counts.hits());
    known.second = std::max(known.second, counts.misses());
  }
  bytesHashed_ = std::max(bytesHashed_, progress.bytes_hashed());
}

nlohmann::json ProgressRenderer::eventJson(const flowc::v1::SubmitEvent &event) {
  nlohmann::json line = {{"elapsed", elapsed()}};
  if (event.has_accepted()) {
    line["event"] = "accepted";
    line["job_id"] = event.accepted().job_id();
    return line;
  }
  const flowc::v1::Progress &progress = event.progress();
  remember(progress);
  std::string type = eventType(progress.stage());
  line["event"] = type;
  line["phase"] = type == "phase" ? progress.stage() : phase_;
  line["detail"] = progress.detail();
  nlohmann::json cache = nlohmann::json::object();
  for (const auto &[kind, counts] : cache_)
    cache[kind] = {{"hits", counts.first}, {"misses", counts.second}};
  line["cache"] = cache;
  line["bytes_hashed"] = bytesHashed_;
  line["eta"] = eta_ >= 0 ? nlohmann::json(eta_) : nlohmann::json(nullptr);
  if (type == "pass") {
    line["pass"] = progress.pass();
    line["seconds"] = progress.seconds();
  } else if (type == "kernel") {
    line["kernel"] = progress.kernel();
    line["index"] = progress.kernel_index();
    line["count"] = progress.kernel_count();
    line["cached"] = progress.kernel_cached();
    line["seconds"] = progress.seconds();
    line["executor"] = progress.executor();
  } else {
    line["count"] = kernelCount_;
  }
  return line;
}

std::string ProgressRenderer::statusLine() const {
  std::string bar(kBarWidth, '.');
  if (kernelCount_ > 0)
    std::fill_n(bar.begin(),
                std::min<size_t>(kBarWidth, kBarWidth * kernelIndex_ / kernelCount_),
                '#');
  std::string line = "[" + bar + "]";
  if (kernelCount_ > 0)
    line += " " + std::to_string(kernelIndex_) + "/" + std::to_string(kernelCount_);
  if (!phase_.empty())
    line += " " + phase_;
  line += "  " + durationText(elapsed());
  if (eta_ >= 0)
    line += "  ETA " + durationText(eta_);
  // Names last: a narrow terminal cuts them, not the figures.
  if (!kernel_.empty())
    line += "  kernel " + kernel_;
  else if (!pass_.empty())
    line += "  pass " + pass_;
  return printable(line);
}

void ProgressRenderer::event(const flowc::v1::SubmitEvent &event) {
  std::lock_guard lock(mutex_);
  // IR text asked for with --print-ir-after: always shown, verbatim.
  if (event.has_progress() && event.progress().stage() == "ir") {
    finishLocked();
    err_ << event.progress().detail();
    return;
  }
  switch (mode_) {
  case ProgressMode::None:
    return;
  case ProgressMode::Json:
    out_ << eventJson(event).dump(-1, ' ', false,
                                  nlohmann::json::error_handler_t::replace)
         << std::endl;
    return;
  case ProgressMode::Text: {
    char stamp[32];
    if (event.has_accepted()) {
      std::snprintf(stamp, sizeof stamp, "%.3f", elapsed());
      err_ << "flowc: [" << stamp << "s] accepted: job " << event.accepted().job_id()
           << "\n";
      return;
    }
    std::snprintf(stamp, sizeof stamp, "%.3f", event.progress().elapsed_seconds());
    err_ << "flowc: [" << stamp << "s] " << event.progress().stage() << ": "
         << event.progress().detail() << "\n";
    return;
  }
  case ProgressMode::Terminal:
    if (event.has_progress())
      remember(event.progress());
    drawLocked();
    return;
  }
}

void ProgressRenderer::drawLocked() {
  err_ << "\r" << fitted(statusLine(), columns_ - 1) << "\x1b[K" << std::flush;
  lineOpen_ = true;
}

void ProgressRenderer::tick() {
  std::lock_guard lock(mutex_);
  if (mode_ == ProgressMode::Terminal && lineOpen_)
    drawLocked();
}

void ProgressRenderer::finish() {
  std::lock_guard lock(mutex_);
  finishLocked();
}

void ProgressRenderer::finishLocked() {
  if (!lineOpen_)
    return;
  err_ << "\n" << std::flush;
  lineOpen_ = false;
}

} // namespace flowc::cli
