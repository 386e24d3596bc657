// IEEE binary16 (float16) and bfloat16 to and from float32, as stored
// bits. Float32 to either rounds to nearest, ties to even, as the hardware
// conversions do; overflow gives infinity and NaN stays NaN.
#pragma once

#include <cstdint>

namespace flowc {

uint16_t floatToHalf(float value);
float halfToFloat(uint16_t bits);
uint16_t floatToBfloat16(float value);
float bfloat16ToFloat(uint16_t bits);

} // namespace flowc
