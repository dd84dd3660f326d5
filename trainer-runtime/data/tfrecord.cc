#include "trainer-runtime/data/tfrecord.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/data/crc32c.h"

namespace kubetrain::runtime::data {
namespace {

void PutLittleEndian32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
void PutLittleEndian64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetLittleEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}
uint64_t GetLittleEndian64(const char* p) {
  return uint64_t{GetLittleEndian32(p)} | uint64_t{GetLittleEndian32(p + 4)} << 32;
}

void EncodeHeader(uint64_t length, char header[kTFRecordHeaderBytes]) {
  PutLittleEndian64(length, header);
  PutLittleEndian32(MaskCrc32c(Crc32cExtend(0, header, 8)), header + 8);
}

absl::Status CorruptError(std::string_view name, uint64_t offset, std::string_view what) {
  return absl::DataLossError(absl::StrCat(std::string(name), ": corrupt record at byte offset ",
                                          offset, ": ", std::string(what)));
}

// Checks a header; on success stores the data length.
absl::Status DecodeHeader(const char* header, std::string_view name, uint64_t offset,
                          uint64_t* length) {
  if (MaskCrc32c(Crc32cExtend(0, header, 8)) != GetLittleEndian32(header + 8)) {
    return CorruptError(name, offset, "length CRC mismatch");
  }
  *length = GetLittleEndian64(header);
  return absl::OkStatus();
}

absl::Status CheckData(std::string_view data, const char* footer, std::string_view name,
                       uint64_t offset) {
  if (MaskCrc32c(Crc32cExtend(0, data.data(), data.size())) != GetLittleEndian32(footer)) {
    return CorruptError(name, offset, absl::StrCat("data CRC mismatch (", data.size(), " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status TruncatedError(std::string_view name, uint64_t offset, std::string_view what) {
  return absl::DataLossError(absl::StrCat(std::string(name), ": truncated record at byte offset ",
                                          offset, ": ", std::string(what)));
}

absl::Status IoError(const std::string& path, std::string_view op, int err) {
  return absl::InternalError(absl::StrCat(path, ": ", std::string(op), ": ", std::strerror(err)));
}

}  // namespace

void AppendTFRecord(std::string_view record, std::string* out) {
  char header[kTFRecordHeaderBytes];
  EncodeHeader(record.size(), header);
  char footer[kTFRecordFooterBytes];
  PutLittleEndian32(MaskCrc32c(Crc32c(record)), footer);
  out->append(header, sizeof(header));
  out->append(record);
  out->append(footer, sizeof(footer));
}

// --- Writer ------------------------------------------------------------------

TFRecordWriter::TFRecordWriter(std::string path, std::FILE* file, uint64_t offset)
    : path_(std::move(path)), file_(file), offset_(offset) {}

TFRecordWriter::~TFRecordWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(const std::string& path,
                                                                     bool append) {
  std::FILE* file = std::fopen(path.c_str(), append ? "ab" : "wb");
  if (file == nullptr) return IoError(path, "cannot open for writing", errno);
  uint64_t offset = 0;
  if (append) {
    struct stat st;
    if (::fstat(fileno(file), &st) == 0) offset = static_cast<uint64_t>(st.st_size);
  }
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(path, file, offset));
}

absl::Status TFRecordWriter::Write(std::string_view record) {
  if (file_ == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  char header[kTFRecordHeaderBytes];
  EncodeHeader(record.size(), header);
  char footer[kTFRecordFooterBytes];
  PutLittleEndian32(MaskCrc32c(Crc32c(record)), footer);
  if (std::fwrite(header, 1, sizeof(header), file_) != sizeof(header) ||
      std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fwrite(footer, 1, sizeof(footer), file_) != sizeof(footer)) {
    return IoError(path_, absl::StrCat("write failed at byte offset ", offset_), errno);
  }
  offset_ += sizeof(header) + record.size() + sizeof(footer);
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Flush() {
  if (file_ == nullptr) return absl::OkStatus();
  if (std::fflush(file_) != 0) return IoError(path_, "flush failed", errno);
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Sync() {
  if (file_ == nullptr) return absl::OkStatus();
  if (absl::Status s = Flush(); !s.ok()) return s;
  if (::fsync(fileno(file_)) != 0) return IoError(path_, "fsync failed", errno);
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  std::FILE* file = std::exchange(file_, nullptr);
  if (std::fclose(file) != 0) return IoError(path_, "close failed", errno);
  return absl::OkStatus();
}

// --- In-memory parser -------------------------------------------------------------

TFRecordParser::TFRecordParser(std::string_view buffer, std::string name)
    : buffer_(buffer), name_(std::move(name)) {}

absl::StatusOr<bool> TFRecordParser::ReadRecord(std::string* out) {
  if (!error_.ok()) return error_;
  const uint64_t remaining = buffer_.size() - offset_;
  if (remaining == 0) return false;
  if (remaining < kTFRecordHeaderBytes) {
    error_ = TruncatedError(
        name_, offset_,
        absl::StrCat("header has ", remaining, " of ", kTFRecordHeaderBytes, " bytes"));
    return error_;
  }
  uint64_t length = 0;
  error_ = DecodeHeader(buffer_.data() + offset_, name_, offset_, &length);
  if (!error_.ok()) return error_;
  const uint64_t body = remaining - kTFRecordHeaderBytes;
  if (body < kTFRecordFooterBytes || length > body - kTFRecordFooterBytes) {
    error_ =
        TruncatedError(name_, offset_,
                       absl::StrCat("header declares ", length, " data bytes, ",
                                    body < kTFRecordFooterBytes ? 0 : body - kTFRecordFooterBytes,
                                    " remain before the CRC"));
    return error_;
  }
  const std::string_view data = buffer_.substr(offset_ + kTFRecordHeaderBytes, length);
  error_ = CheckData(data, data.data() + length, name_, offset_);
  if (!error_.ok()) return error_;
  out->assign(data.data(), data.size());
  offset_ += kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  return true;
}

// --- File reader -----------------------------------------------------------------

TFRecordReader::TFRecordReader(std::string path, std::FILE* file)
    : path_(std::move(path)), file_(file) {}

TFRecordReader::~TFRecordReader() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<TFRecordReader>> TFRecordReader::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return IoError(path, "stat failed", errno);
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": is a directory, expected a file"));
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return IoError(path, "cannot open", errno);
  return std::unique_ptr<TFRecordReader>(new TFRecordReader(path, file));
}

uint64_t TFRecordReader::RemainingBytes(uint64_t needed) {
  if (file_size_ < offset_ || file_size_ - offset_ < needed) {
    struct stat st;
    if (::fstat(fileno(file_), &st) == 0) file_size_ = static_cast<uint64_t>(st.st_size);
  }
  return file_size_ < offset_ ? 0 : file_size_ - offset_;
}

absl::StatusOr<bool> TFRecordReader::ReadRecord(std::string* out) {
  if (!error_.ok()) return error_;
  char header[kTFRecordHeaderBytes];
  const size_t got = std::fread(header, 1, sizeof(header), file_);
  if (got == 0 && std::feof(file_)) {
    std::clearerr(file_);  // a later call sees records appended meanwhile
    return false;
  }
  if (got < sizeof(header)) {
    if (std::ferror(file_)) {
      error_ = IoError(path_, absl::StrCat("read failed at byte offset ", offset_), errno);
    } else {
      error_ = TruncatedError(
          path_, offset_, absl::StrCat("header has ", got, " of ", kTFRecordHeaderBytes, " bytes"));
    }
    return error_;
  }
  uint64_t length = 0;
  error_ = DecodeHeader(header, path_, offset_, &length);
  if (!error_.ok()) return error_;
  // Checked against the file size before allocating: a corrupt length whose
  // CRC happens to match must not make us allocate terabytes.
  // From the start of this record; saturating sums, `length` is untrusted.
  const uint64_t needed = length > UINT64_MAX - 16 ? UINT64_MAX : length + 16;
  const uint64_t remaining = RemainingBytes(needed);
  const uint64_t body = remaining - std::min<uint64_t>(remaining, kTFRecordHeaderBytes);
  if (body < kTFRecordFooterBytes || length > body - kTFRecordFooterBytes) {
    error_ =
        TruncatedError(path_, offset_,
                       absl::StrCat("header declares ", length, " data bytes, ",
                                    body < kTFRecordFooterBytes ? 0 : body - kTFRecordFooterBytes,
                                    " remain before the CRC"));
    return error_;
  }
  out->resize(length);
  char footer[kTFRecordFooterBytes];
  if (std::fread(out->data(), 1, length, file_) != length ||
      std::fread(footer, 1, sizeof(footer), file_) != sizeof(footer)) {
    error_ = std::ferror(file_)
                 ? IoError(path_, absl::StrCat("read failed at byte offset ", offset_), errno)
                 : TruncatedError(path_, offset_, "file ended inside the record");
    return error_;
  }
  error_ = CheckData(*out, footer, path_, offset_);
  if (!error_.ok()) return error_;
  offset_ += kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  return true;
}

}  // namespace kubetrain::runtime::data
