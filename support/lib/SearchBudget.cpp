#include "flowc/support/SearchBudget.h"

#include <cstdio>
#include <cstdlib>

namespace flowc {

Expected<SearchBudget> SearchBudget::parse(const std::string &text) {
  if (text == "none")
    return SearchBudget{};
  if (text == "exhaustive")
    return SearchBudget{Mode::Exhaustive, 0};
  char *end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(seconds > 0) || seconds > kMaxSearchSeconds)
    return invalidArgument("search budget '" + text +
                           "' is not a number of seconds (> 0), 'none' or 'exhaustive'");
  return SearchBudget{Mode::Seconds, seconds};
}

std::string SearchBudget::text() const {
  switch (mode) {
  case Mode::None:
    return "none";
  case Mode::Exhaustive:
    return "exhaustive";
  case Mode::Seconds:
    break;
  }
  char figure[32];
  std::snprintf(figure, sizeof figure, "%g", seconds);
  return figure;
}

} // namespace flowc
