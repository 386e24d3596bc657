// A reader of the protobuf wire format over a byte range. Length-delimited
// fields come back as views, so nested messages and tensor bytes are never
// copied. Private to the ONNX importer.
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flowc::compiler::onnx {

enum class WireType : uint8_t { Varint = 0, Fixed64 = 1, Bytes = 2, Fixed32 = 5 };

struct WireField {
  uint32_t number = 0;
  WireType type = WireType::Varint;
  uint64_t varint = 0;    // Varint, Fixed64 and Fixed32 payloads.
  std::string_view bytes; // Bytes payload.
  size_t offset = 0;      // Offset of the field's tag within the whole file.
};

class WireReader {
public:
  /// `base` is the offset of `data` within the file, for messages.
  WireReader(std::string_view data, size_t base) : data_(data), base_(base) {}

  bool atEnd() const { return pos_ >= data_.size(); }

  /// Reads the next field; InvalidArgument naming the byte offset if the
  /// bytes are truncated or not protobuf.
  Expected<WireField> next();

  /// Offset within the file of the bytes of a field's payload.
  size_t payloadOffset(const WireField &field) const {
    return base_ + static_cast<size_t>(field.bytes.data() - data_.data());
  }

private:
  Expected<uint64_t> readVarint();

  std::string_view data_;
  size_t base_;
  size_t pos_ = 0;
};

/// Decodes a packed repeated varint field into `out`.
template <typename T>
Status decodePackedVarints(std::string_view bytes, std::vector<T> &out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint64_t value = 0;
    int shift = 0;
    while (true) {
      if (pos >= bytes.size() || shift > 63)
        return invalidArgument("truncated packed varint");
      uint8_t byte = static_cast<uint8_t>(bytes[pos++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        break;
      shift += 7;
    }
    out.push_back(static_cast<T>(value));
  }
  return Status::ok();
}

} // namespace flowc::compiler::onnx
