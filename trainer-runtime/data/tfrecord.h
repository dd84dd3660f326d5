#pragma once

// TFRecord files, framed exactly as TensorFlow's io/record_writer.cc does so
// that TensorFlow and TensorBoard read ours and we read theirs:
//
//   uint64 length              little-endian
//   uint32 masked_crc32c(length bytes)
//   byte   data[length]
//   uint32 masked_crc32c(data)
//
// (no compression). Both CRCs are checked when reading.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kubetrain::runtime::data {

inline constexpr size_t kTFRecordHeaderBytes = 12;  // length + its CRC
inline constexpr size_t kTFRecordFooterBytes = 4;   // data CRC

// Appends one framed record to `out`.
void AppendTFRecord(std::string_view record, std::string* out);

// Writes records to a file. Not thread-safe (one writer per file; callers
// that share one serialise access). Errors name the file.
class TFRecordWriter {
 public:
  // Creates or truncates `path` (appends when `append`).
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Open(const std::string& path,
                                                              bool append = false);
  ~TFRecordWriter();  // closes the file, ignoring errors: call Close() to see them
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  absl::Status Write(std::string_view record);
  // Hands buffered records to the OS (readers of the file see them).
  absl::Status Flush();
  // Flush() and fsync: the records survive a machine crash.
  absl::Status Sync();
  // Flushes and closes; later calls return OK, Write after Close fails.
  absl::Status Close();

  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return offset_; }

 private:
  TFRecordWriter(std::string path, std::FILE* file, uint64_t offset);
  std::string path_;
  std::FILE* file_;
  uint64_t offset_;
};

// Reads records from a buffer in memory (the whole file's bytes). Never
// reads outside the buffer, never allocates more than the buffer holds:
// safe on hostile input. Not thread-safe. Errors are sticky.
class TFRecordParser {
 public:
  // `buffer` must outlive the parser; `name` appears in error messages.
  TFRecordParser(std::string_view buffer, std::string name);

  // The next record in *out: true, or false at a clean end of data.
  // DATA_LOSS naming the file and the record's byte offset for a length
  // CRC or data CRC mismatch or a truncated record.
  absl::StatusOr<bool> ReadRecord(std::string* out);
  // Offset of the next record.
  uint64_t offset() const { return offset_; }

 private:
  std::string_view buffer_;
  std::string name_;
  uint64_t offset_ = 0;
  absl::Status error_;
};

// Reads records from a file, streaming. Not thread-safe. Errors are sticky.
class TFRecordReader {
 public:
  static absl::StatusOr<std::unique_ptr<TFRecordReader>> Open(const std::string& path);
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // As TFRecordParser::ReadRecord. A record cut short at the end of the file
  // (a writer still writing, or a crash) is DATA_LOSS "truncated".
  absl::StatusOr<bool> ReadRecord(std::string* out);
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  TFRecordReader(std::string path, std::FILE* file);
  // Bytes of the file at and after `offset_`, at least `needed` if the file
  // has them: the size is cached and re-read (fstat) only when the cached
  // one falls short, because the file may be growing.
  uint64_t RemainingBytes(uint64_t needed);

  std::string path_;
  std::FILE* file_;
  uint64_t offset_ = 0;
  uint64_t file_size_ = 0;
  absl::Status error_;
};

}  // namespace kubetrain::runtime::data
