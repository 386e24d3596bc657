#include "flowc/support/ByteSize.h"

#include <cctype>
#include <charconv>

namespace flowc {

Expected<uint64_t> parseByteSize(const std::string &text) {
  auto bad = [&] {
    return invalidArgument("invalid size '" + text + "' (examples: 20G, 512M, 65536)");
  };
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data())
    return bad();
  std::string suffix(end, text.data() + text.size());
  for (char &c : suffix)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.ends_with("IB"))
    suffix.resize(suffix.size() - 2);
  else if (suffix.ends_with("B"))
    suffix.resize(suffix.size() - 1);
  int shift = 0;
  if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else if (!suffix.empty())
    return bad();
  if (shift && value > (UINT64_MAX >> shift))
    return bad();
  return value << shift;
}

} // namespace flowc
