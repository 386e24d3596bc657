#include "flowc/support/Half.h"

#include <cstring>

namespace flowc {

namespace {

float fromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint32_t toBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

} // namespace

uint16_t floatToHalf(float value) {
  uint32_t x = toBits(value);
  uint32_t sign = (x >> 16) & 0x8000, exponent = (x >> 23) & 0xff,
           mantissa = x & 0x7fffff;
  if (exponent == 0xff)
    return static_cast<uint16_t>(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  int32_t biased = static_cast<int32_t>(exponent) - 127 + 15;
  if (biased >= 31)
    return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t shift = 13, bits;
  if (biased <= 0) {
    if (biased < -10)
      return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    shift = static_cast<uint32_t>(14 - biased);
    bits = mantissa >> shift;
  } else {
    bits = (static_cast<uint32_t>(biased) << 10) | (mantissa >> shift);
  }
  uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (bits & 1)))
    ++bits; // a carry into the exponent is the correct rounding
  return static_cast<uint16_t>(sign | bits);
}

float halfToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  if (exponent == 0x1f)
    return fromBits(sign | 0x7f800000 | (mantissa << 13));
  if (exponent != 0)
    return fromBits(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float32.
  float magnitude = static_cast<float>(mantissa) * fromBits(0x33800000);
  return sign ? -magnitude : magnitude;
}

uint16_t floatToBfloat16(float value) {
  uint32_t x = toBits(value);
  if ((x & 0x7fffffff) > 0x7f800000)
    return static_cast<uint16_t>((x >> 16) | 0x40); // NaN stays a quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16ToFloat(uint16_t bits) {
  return fromBits(static_cast<uint32_t>(bits) << 16);
}

} // namespace flowc
