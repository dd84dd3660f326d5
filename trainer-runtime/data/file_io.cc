#include "trainer-runtime/data/file_io.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::runtime::data {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// The gzip trailer's ISIZE field: the uncompressed size modulo 2^32 of the
// last member. Only a hint for reserving memory.
size_t GzipSizeHint(std::string_view compressed) {
  if (compressed.size() < 18) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(compressed.data() + compressed.size() - 4);
  return static_cast<size_t>(p[0]) | static_cast<size_t>(p[1]) << 8 |
         static_cast<size_t>(p[2]) << 16 | static_cast<size_t>(p[3]) << 24;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::InternalError(absl::StrCat(path, ": stat failed: ", std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": is a directory, expected a file"));
  }
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    const int err = errno;
    if (err == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(path, ": ", std::strerror(err)));
    }
    return absl::InternalError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::string out;
  if (S_ISREG(st.st_mode) && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const size_t n = std::fread(buffer, 1, sizeof(buffer), file.get());
    out.append(buffer, n);
    if (n < sizeof(buffer)) {
      if (std::ferror(file.get())) {
        return absl::DataLossError(
            absl::StrCat(path, ": read failed at byte ", out.size(), ": ", std::strerror(errno)));
      }
      break;
    }
  }
  return out;
}

bool LooksGzipped(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

absl::StatusOr<std::string> Gunzip(std::string_view compressed, std::string_view name_view,
                                   size_t max_output_bytes) {
  const absl::string_view name = ToAbsl(name_view);
  z_stream stream;
  std::memset(&stream, 0, sizeof(stream));
  // 16 + MAX_WBITS: expect a gzip header and trailer (CRC32 and size are checked by zlib).
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError(absl::StrCat(name, ": cannot initialise zlib"));
  }
  struct Ender {
    z_stream* s;
    ~Ender() { inflateEnd(s); }
  } ender{&stream};

  std::string out;
  const size_t hint = GzipSizeHint(compressed);
  if (hint > 0 && hint <= max_output_bytes) out.reserve(hint);

  size_t consumed = 0;
  size_t produced = 0;
  while (true) {
    // Room for at least 4 KiB more output, up to one byte past the cap so
    // that exceeding it is noticed below.
    if (out.size() - produced < 4096 && out.size() <= max_output_bytes) {
      const size_t grow = std::max<size_t>(out.size(), 1 << 16);
      out.resize(std::min(out.size() + grow, max_output_bytes + 1));
    }
    // zlib counts in uInt; feed at most 1 GiB at a time.
    const size_t in_left = compressed.size() - consumed;
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data() + consumed));
    stream.avail_in = static_cast<uInt>(std::min<size_t>(in_left, 1u << 30));
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    const uInt avail_in_before = stream.avail_in;
    const uInt avail_out_before = stream.avail_out;
    const int rc = inflate(&stream, Z_NO_FLUSH);
    consumed += avail_in_before - stream.avail_in;
    produced += avail_out_before - stream.avail_out;
    if (produced > max_output_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          name, ": decompressed data exceeds the limit of ", max_output_bytes, " bytes"));
    }
    if (rc == Z_STREAM_END) {
      // Another member may follow; trailing zero padding is tolerated like gzip(1) does.
      std::string_view rest = compressed.substr(consumed);
      if (rest.empty() || rest.find_first_not_of('\0') == std::string_view::npos) break;
      if (!LooksGzipped(rest)) {
        return absl::DataLossError(
            absl::StrCat(name, ": trailing garbage after gzip data at byte ", consumed));
      }
      if (inflateReset(&stream) != Z_OK) {
        return absl::InternalError(absl::StrCat(name, ": cannot reset zlib"));
      }
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && stream.avail_out == 0) continue;  // more room is made above
    if (rc == Z_BUF_ERROR && consumed == compressed.size()) {
      return absl::DataLossError(absl::StrCat(name, ": truncated gzip data (", compressed.size(),
                                              " compressed bytes end before the gzip trailer; ",
                                              produced, " bytes decompressed)"));
    }
    const char* msg = stream.msg != nullptr ? stream.msg : "unknown error";
    return absl::DataLossError(
        absl::StrCat(name, ": corrupt gzip data near compressed byte ", consumed, ": ", msg));
  }
  out.resize(produced);
  return out;
}

absl::StatusOr<std::string> MaybeGunzip(std::string_view bytes, std::string_view name_view,
                                        size_t max_output_bytes) {
  if (LooksGzipped(bytes)) return Gunzip(bytes, name_view, max_output_bytes);
  const absl::string_view name = ToAbsl(name_view);
  if (bytes.size() > max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ": ", bytes.size(), " bytes exceed the limit of ", max_output_bytes));
  }
  return std::string(bytes);
}

}  // namespace kubetrain::runtime::data
