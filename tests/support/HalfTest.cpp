#include "flowc/support/Half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace flowc {
namespace {

TEST(HalfTest, EveryHalfWidensAndNarrowsBackExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    float value = halfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(value)))) << bits;
      continue;
    }
    EXPECT_EQ(floatToHalf(value), bits) << bits;
  }
}

TEST(HalfTest, WidensKnownValues) {
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0xc000), -2.0f);
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24)); // smallest subnormal
  EXPECT_EQ(halfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)));
}

TEST(HalfTest, NarrowsToNearestTiesToEvenAndSaturatesToInfinity) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: the even one, 1.
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9: the even one.
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00); // rounds past the largest half
  EXPECT_EQ(floatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -26)), 0x0000); // below half the smallest
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -26)), 0x0001);
}

TEST(HalfTest, Bfloat16KeepsTheTopBitsRoundedToEven) {
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the even one, 1.
  EXPECT_EQ(floatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(floatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(std::nanf("")))));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    float value = bfloat16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(value)) {
      EXPECT_EQ(floatToBfloat16(value), bits) << bits;
    }
  }
}

} // namespace
} // namespace flowc
