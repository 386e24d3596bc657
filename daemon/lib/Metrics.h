// Prometheus text exposition (docs/web-ui.md's /metrics): histograms and
// the writer that renders counters, gauges and histograms with their HELP
// and TYPE lines.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace flowc::daemon {

/// Cumulative buckets over fixed upper bounds, in seconds.
class Histogram {
public:
  Histogram();
  void observe(double value);
  const std::vector<double> &bounds() const { return bounds_; }
  /// Per bound, the observations at or below it (cumulative).
  const std::vector<uint64_t> &buckets() const { return buckets_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

private:
  std::vector<double> bounds_;
  std::vector<uint64_t> buckets_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

/// Labels as `{key="value",...}`, values escaped as the format requires.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsWriter {
public:
  /// Starts metric family `name` ("counter", "gauge" or "histogram").
  void family(const std::string &name, const std::string &type, const std::string &help);
  void sample(const std::string &name, const MetricLabels &labels, double value);
  void histogram(const std::string &name, const MetricLabels &labels,
                 const Histogram &histogram);
  const std::string &text() const { return text_; }

private:
  std::string text_;
};

} // namespace flowc::daemon
