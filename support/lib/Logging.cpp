#include "flowc/support/Logging.h"

#include <memory>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <string>

namespace flowc {

void logWarningsToStderr(const char *name, bool keepHostLogger) {
  if (keepHostLogger && !spdlog::default_logger()->name().empty())
    return;
  auto logger = std::make_shared<spdlog::logger>(
      name, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern(std::string(name) + ": %l: %v");
  logger->set_level(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

} // namespace flowc
