// libFuzzer target for TFRecord reading, in two modes chosen by the first byte:
//  even: the rest is parsed as a TFRecord file as is (mostly CRC failures,
//        which must be clean errors);
//  odd:  the rest is cut into records, framed with valid CRCs, the framed
//        bytes are cut or have one byte flipped, and the parser must return
//        exactly the intact leading records and then a clean end or an error.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainer-runtime/data/tfrecord.h"

namespace {

using kubetrain::runtime::data::AppendTFRecord;
using kubetrain::runtime::data::TFRecordParser;

std::vector<std::string> ReadAll(std::string_view bytes, bool* clean_end) {
  TFRecordParser parser(bytes, "fuzz");
  std::vector<std::string> records;
  std::string record;
  while (true) {
    auto more = parser.ReadRecord(&record);
    if (!more.ok()) {
      *clean_end = false;
      return records;
    }
    if (!*more) {
      *clean_end = true;
      return records;
    }
    records.push_back(record);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 3, size - 3);
  bool clean_end = false;
  if ((data[0] & 1) == 0) {
    ReadAll(rest, &clean_end);
    return 0;
  }
  // Records are separated by '|' in the input.
  std::vector<std::string> records;
  std::string framed;
  std::vector<size_t> ends;  // framed offset after each record
  size_t start = 0;
  while (start <= rest.size()) {
    size_t bar = rest.find('|', start);
    if (bar == std::string_view::npos) bar = rest.size();
    records.emplace_back(rest.substr(start, bar - start));
    AppendTFRecord(records.back(), &framed);
    ends.push_back(framed.size());
    start = bar + 1;
  }
  const size_t position = framed.empty() ? 0 : (size_t{data[1]} << 8 | data[2]) % framed.size();
  std::string damaged = framed;
  if (data[0] & 2) {
    damaged.resize(position);  // truncation
  } else if (!damaged.empty()) {
    damaged[position] ^= static_cast<char>(1 + (data[0] >> 2));  // flip bits
  }
  const std::vector<std::string> read = ReadAll(damaged, &clean_end);
  // Every record wholly before the damage comes back intact, in order.
  size_t intact = 0;
  while (intact < ends.size() && ends[intact] <= position) ++intact;
  if (read.size() < intact) __builtin_trap();
  for (size_t i = 0; i < read.size() && i < records.size(); ++i) {
    if (i < intact && read[i] != records[i]) __builtin_trap();
  }
  // A cut exactly at a record boundary is a clean end; anywhere else an error.
  if (data[0] & 2) {
    const bool at_boundary = position == 0 || (intact > 0 && ends[intact - 1] == position);
    if (clean_end != at_boundary || read.size() != intact) __builtin_trap();
  } else if (read.size() > intact) {
    // A flipped bit that still passes both CRCs would be a CRC32C failure to
    // detect a single-burst error, which it always detects.
    __builtin_trap();
  }
  return 0;
}
