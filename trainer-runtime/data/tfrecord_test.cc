#include "trainer-runtime/data/tfrecord.h"

#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/data/crc32c.h"
#include "trainer-runtime/data/test_util.h"

namespace kubetrain::runtime::data {
namespace {

using ::kubetrain::runtime::data::testing::ReadAll;
using ::kubetrain::runtime::data::testing::WriteFile;
using ::testing::HasSubstr;

const std::vector<std::string> kRecords = {"first", "", std::string(1000, 'x'),
                                           std::string("\0\1\2", 3)};

std::string WriteRecords(const std::string& path) {
  auto writer = TFRecordWriter::Open(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (const std::string& r : kRecords) EXPECT_TRUE((*writer)->Write(r).ok());
  EXPECT_TRUE((*writer)->Close().ok());
  return ReadAll(path);
}

std::vector<std::string> ReadAllRecords(TFRecordReader& reader, absl::Status* status) {
  std::vector<std::string> out;
  std::string record;
  while (true) {
    auto more = reader.ReadRecord(&record);
    if (!more.ok()) {
      *status = more.status();
      return out;
    }
    if (!*more) return out;
    out.push_back(record);
  }
}

TEST(TFRecordTest, FramingIsTensorFlows) {
  std::string framed;
  AppendTFRecord("abc", &framed);
  ASSERT_EQ(framed.size(), 12u + 3u + 4u);
  // uint64 little-endian length.
  EXPECT_EQ(framed.substr(0, 8), std::string("\3\0\0\0\0\0\0\0", 8));
  const auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(framed[at + i]);
    return v;
  };
  EXPECT_EQ(u32(8), MaskCrc32c(Crc32c(framed.substr(0, 8))));
  EXPECT_EQ(framed.substr(12, 3), "abc");
  EXPECT_EQ(u32(15), MaskCrc32c(Crc32c("abc")));
}

TEST(TFRecordTest, FileRoundTripMatchesInMemoryEncoding) {
  test_support::TempDir tmp;
  const std::string path = tmp.path() + "/r.tfrecord";
  const std::string bytes = WriteRecords(path);
  std::string expected;
  for (const std::string& r : kRecords) AppendTFRecord(r, &expected);
  EXPECT_EQ(bytes, expected);

  auto reader = TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::Status status;
  EXPECT_EQ(ReadAllRecords(**reader, &status), kRecords);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ((*reader)->offset(), bytes.size());

  TFRecordParser parser(bytes, "mem");
  std::vector<std::string> parsed;
  std::string record;
  while (true) {
    auto more = parser.ReadRecord(&record);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    parsed.push_back(record);
  }
  EXPECT_EQ(parsed, kRecords);
}

TEST(TFRecordTest, AppendModeContinuesTheFile) {
  test_support::TempDir tmp;
  const std::string path = tmp.path() + "/a.tfrecord";
  WriteRecords(path);
  auto writer = TFRecordWriter::Open(path, /*append=*/true);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Write("more").ok());
  ASSERT_TRUE((*writer)->Close().ok());
  auto reader = TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok());
  absl::Status status;
  auto records = ReadAllRecords(**reader, &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(records.size(), kRecords.size() + 1);
  EXPECT_EQ(records.back(), "more");
}

// Offsets of the records written by WriteRecords: 0, 21, 37, 1053.
constexpr uint64_t kThirdRecordOffset = (12 + 5 + 4) + (12 + 0 + 4);

struct Corruption {
  const char* name;
  size_t byte;  // flipped, relative to the third record
  const char* message;
};

TEST(TFRecordTest, CorruptionNamesFileAndOffset) {
  test_support::TempDir tmp;
  const std::string dir = tmp.path();
  const std::string good = WriteRecords(dir + "/good.tfrecord");
  const Corruption cases[] = {
      {"length", 1, "corrupt record at byte offset 37: length CRC mismatch"},
      {"length_crc", 9, "corrupt record at byte offset 37: length CRC mismatch"},
      {"data", 12 + 500, "corrupt record at byte offset 37: data CRC mismatch (1000 bytes)"},
      {"data_crc", 12 + 1000 + 2, "corrupt record at byte offset 37: data CRC mismatch"},
  };
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.name);
    std::string bad = good;
    bad[kThirdRecordOffset + c.byte] ^= 0x10;
    const std::string path = dir + "/" + c.name + ".tfrecord";
    WriteFile(path, bad);
    auto reader = TFRecordReader::Open(path);
    ASSERT_TRUE(reader.ok());
    absl::Status status;
    const auto records = ReadAllRecords(**reader, &status);
    EXPECT_EQ(records.size(), 2u);  // the records before the corrupt one are read
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(status.message(), HasSubstr(path + ": " + c.message));
    // Sticky: the reader does not skip ahead into garbage.
    std::string record;
    EXPECT_EQ((*reader)->ReadRecord(&record).status(), status);

    TFRecordParser parser(bad, "mem");
    auto r1 = parser.ReadRecord(&record), r2 = parser.ReadRecord(&record),
         r3 = parser.ReadRecord(&record);
    ASSERT_TRUE(r1.ok() && r2.ok());
    EXPECT_THAT(r3.status().message(), HasSubstr(std::string("mem: ") + c.message));
  }
}

TEST(TFRecordTest, TruncationAtEveryPointIsAnErrorOrACleanEnd) {
  test_support::TempDir tmp;
  const std::string dir = tmp.path();
  const std::string good = WriteRecords(dir + "/good.tfrecord");
  const std::vector<size_t> boundaries = {0, 21, 37, 1053, good.size()};
  for (size_t cut = 0; cut <= good.size(); cut += (cut < 60 || cut > good.size() - 60) ? 1 : 97) {
    const std::string path = dir + "/cut.tfrecord";
    WriteFile(path, good.substr(0, cut));
    auto reader = TFRecordReader::Open(path);
    ASSERT_TRUE(reader.ok());
    absl::Status status;
    const auto records = ReadAllRecords(**reader, &status);
    const bool at_boundary =
        std::find(boundaries.begin(), boundaries.end(), cut) != boundaries.end();
    if (at_boundary) {
      EXPECT_TRUE(status.ok()) << "cut " << cut << ": " << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << "cut " << cut;
      EXPECT_THAT(status.message(), HasSubstr(path + ": truncated record at byte offset "));
    }
  }
}

TEST(TFRecordTest, TruncatedHeaderMessage) {
  std::string framed;
  AppendTFRecord("abc", &framed);
  AppendTFRecord("defg", &framed);
  TFRecordParser parser(std::string_view(framed).substr(0, 19 + 5), "f");
  std::string record;
  ASSERT_TRUE(*parser.ReadRecord(&record));
  EXPECT_EQ(parser.ReadRecord(&record).status().message(),
            "f: truncated record at byte offset 19: header has 5 of 12 bytes");
  TFRecordParser short_body(std::string_view(framed).substr(0, 19 + 14), "f");
  ASSERT_TRUE(*short_body.ReadRecord(&record));
  EXPECT_EQ(short_body.ReadRecord(&record).status().message(),
            "f: truncated record at byte offset 19: header declares 4 data bytes, 0 remain before "
            "the CRC");
}

TEST(TFRecordTest, ReaderSeesRecordsAppendedAfterEof) {
  test_support::TempDir tmp;
  const std::string path = tmp.path() + "/grow.tfrecord";
  auto writer = TFRecordWriter::Open(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Write("one").ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  auto reader = TFRecordReader::Open(path);
  ASSERT_TRUE(reader.ok());
  std::string record;
  EXPECT_TRUE(*(*reader)->ReadRecord(&record));
  EXPECT_FALSE(*(*reader)->ReadRecord(&record));
  ASSERT_TRUE((*writer)->Write("two").ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  auto more = (*reader)->ReadRecord(&record);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_TRUE(*more);
  EXPECT_EQ(record, "two");
}

TEST(TFRecordTest, OpenErrorsNameThePath) {
  auto reader = TFRecordReader::Open("/nonexistent/x.tfrecord");
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reader.status().message(), HasSubstr("/nonexistent/x.tfrecord"));
  auto writer = TFRecordWriter::Open("/nonexistent/x.tfrecord");
  EXPECT_FALSE(writer.ok());
  EXPECT_THAT(writer.status().message(), HasSubstr("/nonexistent/x.tfrecord"));
}

TEST(TFRecordTest, WriteAfterCloseFails) {
  test_support::TempDir tmp;
  auto writer = TFRecordWriter::Open(tmp.path() + "/c.tfrecord");
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_TRUE((*writer)->Close().ok());
  EXPECT_EQ((*writer)->Write("x").code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kubetrain::runtime::data
