#include "Metrics.h"

#include <cmath>
#include <cstdio>

namespace flowc::daemon {

namespace {

/// 5 ms to 30 min: a cache hit to a large model's cold compile.
const std::vector<double> kSecondsBounds = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};

std::string number(double value) {
  if (std::isinf(value))
    return value > 0 ? "+Inf" : "-Inf";
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

std::string escapeLabel(const std::string &value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string labelText(const MetricLabels &labels) {
  if (labels.empty())
    return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i)
    out +=
        (i ? "," : "") + labels[i].first + "=\"" + escapeLabel(labels[i].second) + "\"";
  return out + "}";
}

} // namespace

Histogram::Histogram() : bounds_(kSecondsBounds), buckets_(kSecondsBounds.size(), 0) {}

void Histogram::observe(double value) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (value <= bounds_[i])
      ++buckets_[i];
  ++count_;
  sum_ += value;
}

void MetricsWriter::family(const std::string &name, const std::string &type,
                           const std::string &help) {
  text_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void MetricsWriter::sample(const std::string &name, const MetricLabels &labels,
                           double value) {
  text_ += name + labelText(labels) + " " + number(value) + "\n";
}

void MetricsWriter::histogram(const std::string &name, const MetricLabels &labels,
                              const Histogram &histogram) {
  for (size_t i = 0; i < histogram.bounds().size(); ++i) {
    MetricLabels withBound = labels;
    withBound.emplace_back("le", number(histogram.bounds()[i]));
    sample(name + "_bucket", withBound, static_cast<double>(histogram.buckets()[i]));
  }
  MetricLabels all = labels;
  all.emplace_back("le", "+Inf");
  sample(name + "_bucket", all, static_cast<double>(histogram.count()));
  sample(name + "_sum", labels, histogram.sum());
  sample(name + "_count", labels, static_cast<double>(histogram.count()));
}

} // namespace flowc::daemon
