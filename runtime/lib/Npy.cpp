#include "flowc/runtime/Tensor.h"

#include "flowc/support/Half.h"
#include "flowc/support/MappedFile.h"

#include <charconv>
#include <cstring>
#include <regex>

namespace flowc::runtime {

size_t dtypeBytes(const std::string &dtype) {
  if (dtype == "float32" || dtype == "int32" || dtype == "uint32")
    return 4;
  if (dtype == "int64" || dtype == "float64" || dtype == "uint64")
    return 8;
  if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16" || dtype == "uint16")
    return 2;
  if (dtype == "bool" || dtype == "int8" || dtype == "uint8")
    return 1;
  return 0;
}

int64_t Tensor::elementCount() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

Tensor Tensor::zeros(const std::string &dtype, const std::vector<int64_t> &shape) {
  Tensor tensor{dtype, shape, {}};
  tensor.bytes.assign(static_cast<size_t>(tensor.elementCount()) * dtypeBytes(dtype), 0);
  return tensor;
}

Tensor Tensor::uninitialized(const std::string &dtype,
                             const std::vector<int64_t> &shape) {
  Tensor tensor{dtype, shape, {}};
  tensor.bytes.resize(static_cast<size_t>(tensor.elementCount()) * dtypeBytes(dtype));
  return tensor;
}

Tensor Tensor::fromFloats(const std::vector<int64_t> &shape,
                          const std::vector<float> &values) {
  Tensor tensor{"float32", shape, TensorBytes(values.size() * 4)};
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

std::vector<float> Tensor::floats() const {
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

double Tensor::element(size_t i) const {
  const uint8_t *at = bytes.data() + i * dtypeBytes(dtype);
  if (dtype == "float32") {
    float value;
    std::memcpy(&value, at, 4);
    return value;
  }
  if (dtype == "int64") {
    int64_t value;
    std::memcpy(&value, at, 8);
    return static_cast<double>(value);
  }
  if (dtype == "int32") {
    int32_t value;
    std::memcpy(&value, at, 4);
    return value;
  }
  if (dtype == "float16") {
    uint16_t bits;
    std::memcpy(&bits, at, 2);
    return halfToFloat(bits);
  }
  if (dtype == "int8")
    return static_cast<int8_t>(*at);
  return *at; // uint8, bool
}

namespace {

/// NumPy's type string of a dtype and back; empty when there is none.
std::string npyDescr(const std::string &dtype) {
  if (dtype == "float32")
    return "<f4";
  if (dtype == "float16")
    return "<f2";
  if (dtype == "int64")
    return "<i8";
  if (dtype == "int32")
    return "<i4";
  if (dtype == "int8")
    return "|i1";
  if (dtype == "uint8")
    return "|u1";
  if (dtype == "bool")
    return "|b1";
  return "";
}

std::string dtypeOfDescr(const std::string &descr) {
  for (const char *dtype :
       {"float32", "float16", "int64", "int32", "int8", "uint8", "bool"})
    if (npyDescr(dtype) == descr)
      return dtype;
  return "";
}

/// The value of `'key': value` in a .npy header dict.
std::string headerField(const std::string &header, const std::string &key) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos)
    return "";
  size_t colon = header.find(':', at);
  if (colon == std::string::npos)
    return "";
  size_t begin = header.find_first_not_of(' ', colon + 1);
  if (begin == std::string::npos)
    return "";
  char open = header[begin];
  if (open == '(') {
    size_t end = header.find(')', begin);
    return end == std::string::npos ? "" : header.substr(begin, end - begin + 1);
  }
  if (open == '\'') {
    size_t end = header.find('\'', begin + 1);
    return end == std::string::npos ? "" : header.substr(begin + 1, end - begin - 1);
  }
  size_t end = header.find_first_of(",}", begin);
  return header.substr(begin, end - begin);
}

} // namespace

Expected<Tensor> readNpy(const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  auto bad = [&](const std::string &what) {
    return invalidArgument("'" + path + "': " + what);
  };
  const uint8_t *bytes = file.data();
  if (file.size() < 10 || std::memcmp(bytes, "\x93NUMPY", 6) != 0)
    return bad("not a .npy file (bad magic)");
  uint8_t major = bytes[6];
  size_t headerLength = 0, headerStart = 0;
  if (major == 1) {
    headerLength = bytes[8] | bytes[9] << 8;
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12)
      return bad("truncated .npy header");
    headerLength = bytes[8] | bytes[9] << 8 | bytes[10] << 16 | size_t(bytes[11]) << 24;
    headerStart = 12;
  } else {
    return bad("unsupported .npy version " + std::to_string(major));
  }
  if (headerStart + headerLength > file.size())
    return bad("truncated .npy header");
  std::string header(reinterpret_cast<const char *>(bytes) + headerStart, headerLength);
  std::string descr = headerField(header, "descr");
  std::string dtype = dtypeOfDescr(descr);
  if (dtype.empty())
    return bad(
        "dtype '" + descr +
        "' is not supported; flowc run takes float32, float16, int64, int32, int8, uint8 "
        "and bool arrays ('<f4', '<f2', '<i8', '<i4', '|i1', '|u1', '|b1')");
  if (headerField(header, "fortran_order") != "False")
    return bad("Fortran-order arrays are not supported");
  std::string shapeText = headerField(header, "shape");
  if (shapeText.empty())
    return bad("header has no shape");
  Tensor tensor;
  tensor.dtype = dtype;
  static const std::regex number("[0-9]+");
  // The size is checked as it is multiplied out: a header's dimensions are
  // any digits, and a product that wrapped could match a short payload.
  uint64_t needed = dtypeBytes(dtype);
  for (auto it = std::sregex_iterator(shapeText.begin(), shapeText.end(), number);
       it != std::sregex_iterator(); ++it) {
    int64_t dim = 0;
    std::string digits = it->str();
    auto [end, error] =
        std::from_chars(digits.data(), digits.data() + digits.size(), dim);
    if (error != std::errc() || __builtin_mul_overflow(needed, uint64_t(dim), &needed))
      return bad("shape " + shapeText + " is too large");
    tensor.shape.push_back(dim);
  }
  size_t payload = file.size() - headerStart - headerLength;
  if (payload != needed)
    return bad("payload holds " + std::to_string(payload) + " bytes, shape needs " +
               std::to_string(needed));
  tensor.bytes.assign(bytes + headerStart + headerLength,
                      bytes + headerStart + headerLength + payload);
  // numpy reads any non-zero byte of a bool array as True; generated code
  // reads only 0 and 1 (Session::runInPlace refuses the rest).
  if (dtype == "bool")
    for (uint8_t &byte : tensor.bytes)
      byte = byte != 0;
  return tensor;
}

Status writeNpy(const std::string &path, const Tensor &tensor) {
  std::string descr = npyDescr(tensor.dtype);
  if (descr.empty())
    return invalidArgument("'" + path + "': cannot write dtype '" + tensor.dtype + "'");
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape.size(); ++i)
    shape += std::to_string(tensor.shape[i]) +
             (tensor.shape.size() == 1 || i + 1 < tensor.shape.size() ? "," : "");
  shape += ")";
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic + version + length + header + newline is padded to 64 bytes.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(reinterpret_cast<const char *>(tensor.bytes.data()), tensor.bytes.size());
  return writeFileAtomically(path, out);
}

} // namespace flowc::runtime
