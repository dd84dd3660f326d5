#include "trainer-runtime/data/crc32c.h"

#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kubetrain::runtime::data {
namespace {

// Bit-at-a-time CRC-32C straight from the definition, as an independent reference.
uint32_t ReferenceCrc32c(const std::string& data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(Crc32cTest, KnownVectors) {
  // The CRC catalogue's check value, and the RFC 3720 (iSCSI) B.4 vectors.
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(ascending), 0x46dd794eu);
  EXPECT_EQ(Crc32c(descending), 0x113fdb5cu);
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MatchesBitwiseReferenceAtEveryLengthAndAlignment) {
  std::mt19937 gen(7);
  std::string data(300, '\0');
  for (char& c : data) c = static_cast<char>(gen());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len = 0; start + len <= data.size(); len += 7) {
      const std::string piece = data.substr(start, len);
      ASSERT_EQ(Crc32c(piece), ReferenceCrc32c(piece)) << "start " << start << " len " << len;
    }
  }
}

TEST(Crc32cTest, ExtendEqualsWholeCrc) {
  const std::string a = "hello, ", b = "tensorboard world";
  EXPECT_EQ(Crc32cExtend(Crc32c(a), b.data(), b.size()), Crc32c(a + b));
}

TEST(Crc32cTest, MaskRoundTripsAndDiffers) {
  for (uint32_t crc : {0u, 1u, 0xe3069283u, 0xffffffffu}) {
    EXPECT_NE(MaskCrc32c(crc), crc);
    EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
  }
  // Masking rotates right by 15 and adds the TFRecord/LevelDB constant.
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(1u << 15), 1u + 0xa282ead8u);
}

}  // namespace
}  // namespace kubetrain::runtime::data
