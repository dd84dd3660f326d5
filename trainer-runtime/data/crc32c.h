#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kubetrain::runtime::data {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord, iSCSI
// and LevelDB use it. Portable slicing-by-8; thread-safe (the tables are
// built at compile time).
uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t size);
inline uint32_t Crc32c(std::string_view data) { return Crc32cExtend(0, data.data(), data.size()); }

// TFRecord stores CRCs "masked" so that a CRC of data that itself holds CRCs
// does not degenerate (LevelDB's scheme): rotate right 15, add a constant.
constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta; }
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - kCrc32cMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace kubetrain::runtime::data
