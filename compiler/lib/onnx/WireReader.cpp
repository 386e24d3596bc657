#include "WireReader.h"

namespace flowc::compiler::onnx {

Expected<uint64_t> WireReader::readVarint() {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size())
      return invalidArgument("truncated varint at byte " + std::to_string(base_ + pos_));
    uint8_t byte = static_cast<uint8_t>(data_[pos_++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80))
      return value;
  }
  return invalidArgument("varint longer than 10 bytes at byte " +
                         std::to_string(base_ + pos_));
}

Expected<WireField> WireReader::next() {
  WireField field;
  field.offset = base_ + pos_;
  FLOWC_ASSIGN_OR_RETURN(uint64_t tag, readVarint());
  field.number = static_cast<uint32_t>(tag >> 3);
  uint8_t type = tag & 7;
  if (field.number == 0)
    return invalidArgument("field number 0 at byte " + std::to_string(field.offset) +
                           " (not a protobuf message)");
  auto need = [&](size_t n) -> Status {
    if (data_.size() - pos_ < n)
      return invalidArgument("truncated field " + std::to_string(field.number) +
                             " at byte " + std::to_string(field.offset) + ": needs " +
                             std::to_string(n) + " bytes, " +
                             std::to_string(data_.size() - pos_) + " left");
    return Status::ok();
  };
  switch (type) {
  case 0: {
    field.type = WireType::Varint;
    FLOWC_ASSIGN_OR_RETURN(field.varint, readVarint());
    return field;
  }
  case 1:
    field.type = WireType::Fixed64;
    FLOWC_RETURN_IF_ERROR(need(8));
    for (int i = 7; i >= 0; --i)
      field.varint = field.varint << 8 | static_cast<uint8_t>(data_[pos_ + i]);
    pos_ += 8;
    return field;
  case 2: {
    field.type = WireType::Bytes;
    FLOWC_ASSIGN_OR_RETURN(uint64_t length, readVarint());
    FLOWC_RETURN_IF_ERROR(need(length));
    field.bytes = data_.substr(pos_, length);
    pos_ += length;
    return field;
  }
  case 5:
    field.type = WireType::Fixed32;
    FLOWC_RETURN_IF_ERROR(need(4));
    for (int i = 3; i >= 0; --i)
      field.varint = field.varint << 8 | static_cast<uint8_t>(data_[pos_ + i]);
    pos_ += 4;
    return field;
  default:
    return invalidArgument("unsupported wire type " + std::to_string(type) + " at byte " +
                           std::to_string(field.offset) + " (not a protobuf message)");
  }
}

} // namespace flowc::compiler::onnx
