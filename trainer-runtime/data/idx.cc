// IDX (the MNIST file format): a big-endian header
//   byte 0-1: 0, byte 2: element type (0x08 = unsigned byte), byte 3: number
//   of dimensions d, then d uint32 sizes, then the elements row-major.
// Images files have d = 3 (count, rows, cols) and labels files d = 1.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "trainer-runtime/data/dataset.h"
#include "trainer-runtime/data/file_io.h"

namespace kubetrain::runtime::data {
namespace {

constexpr uint8_t kUnsignedByteType = 0x08;

struct IdxHeader {
  std::vector<uint64_t> dims;
  size_t header_bytes = 0;
  uint64_t element_count = 0;  // product of dims
};

uint32_t ReadBigEndian32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

std::string DimsString(const std::vector<uint64_t>& dims) { return absl::StrJoin(dims, "x"); }

// Parses and checks the header of an unsigned-byte IDX file with
// `expected_rank` dimensions (0 = any rank >= 2) against the data size.
absl::StatusOr<IdxHeader> ParseHeader(std::string_view bytes, absl::string_view name,
                                      int expected_rank, absl::string_view what) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    return absl::DataLossError(
        absl::StrCat(name, ": truncated: ", bytes.size(), " bytes, too short for an IDX header"));
  }
  const uint32_t magic = ReadBigEndian32(p);
  const int rank = p[3];
  const bool rank_ok = expected_rank > 0 ? rank == expected_rank : rank >= 2;
  if (p[0] != 0 || p[1] != 0 || p[2] != kUnsignedByteType || !rank_ok) {
    const uint32_t expected =
        expected_rank > 0 ? 0x800u | static_cast<uint32_t>(expected_rank) : 0x803u;
    return absl::DataLossError(absl::StrCat(
        name, ": bad magic number 0x", absl::Hex(magic, absl::kZeroPad8), ", expected 0x",
        absl::Hex(expected, absl::kZeroPad8), " for an IDX ", what, " file of unsigned bytes",
        LooksGzipped(bytes) ? " (the data is still gzip-compressed)" : ""));
  }
  IdxHeader header;
  header.header_bytes = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header.header_bytes) {
    return absl::DataLossError(absl::StrCat(name, ": truncated: ", bytes.size(),
                                            " bytes, the IDX header of rank ", rank, " needs ",
                                            header.header_bytes));
  }
  uint64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    const uint64_t dim = ReadBigEndian32(p + 4 + 4 * i);
    header.dims.push_back(dim);
    overflow = overflow || __builtin_mul_overflow(count, dim, &count);
  }
  if (overflow) count = UINT64_MAX;
  const size_t data_bytes = bytes.size() - header.header_bytes;
  if (count > data_bytes) {
    return absl::DataLossError(
        absl::StrCat(name, ": truncated: header declares ", DimsString(header.dims), " = ",
                     overflow ? "too many" : absl::StrCat(count), " bytes of data but only ",
                     data_bytes, " follow the ", header.header_bytes, "-byte header"));
  }
  if (count < data_bytes) {
    return absl::DataLossError(
        absl::StrCat(name, ": ", data_bytes - count, " bytes of trailing data after the ",
                     DimsString(header.dims), " elements its header declares"));
  }
  for (size_t i = 1; i < header.dims.size(); ++i) {
    if (header.dims[i] == 0) {
      return absl::DataLossError(
          absl::StrCat(name, ": dimension ", i, " of ", DimsString(header.dims), " is 0"));
    }
  }
  header.element_count = count;
  return header;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

struct NamePair {
  std::string_view images;
  std::string_view labels;
};
constexpr std::array<NamePair, 2> kNamings = {{
    {"-images-idx3-ubyte", "-labels-idx1-ubyte"},
    {".images-idx3-ubyte", ".labels-idx1-ubyte"},
}};
// The original MNIST distribution also used "train-images.idx3-ubyte".
constexpr std::array<NamePair, 1> kDottedNamings = {{{"images.idx3-ubyte", "labels.idx1-ubyte"}}};

// Replaces the last `from` in the file-name part of `path` by `to`.
std::string ReplaceInBaseName(std::string_view path, std::string_view from, std::string_view to) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t at = path.rfind(from);
  if (at == std::string_view::npos || at < base) return "";
  return absl::StrCat(ToAbsl(path.substr(0, at)), ToAbsl(to),
                      ToAbsl(path.substr(at + from.size())));
}

bool IsImagesName(std::string_view file_name) {
  for (const auto& n : kNamings) {
    if (file_name.find(n.images) != std::string_view::npos) return true;
  }
  for (const auto& n : kDottedNamings) {
    if (file_name.find(n.images) != std::string_view::npos) return true;
  }
  return false;
}

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// The companion file as named, or with .gz added/removed, whichever exists.
std::vector<std::string> CompanionCandidates(const std::string& path) {
  const std::string companion = IdxCompanionPath(path);
  if (companion.empty()) return {};
  if (EndsWith(companion, ".gz")) {
    return {companion, companion.substr(0, companion.size() - 3)};
  }
  return {companion, companion + ".gz"};
}

absl::StatusOr<Dataset> LoadIdxPair(const std::string& images_path,
                                    const std::string& labels_path) {
  ASSIGN_OR_RETURN(std::string images_raw, ReadFileToString(images_path));
  ASSIGN_OR_RETURN(std::string labels_raw, ReadFileToString(labels_path));
  return ParseIdx(images_raw, images_path, labels_raw, labels_path);
}

}  // namespace

std::string IdxCompanionPath(std::string_view path) {
  for (const auto& n : kNamings) {
    std::string s = ReplaceInBaseName(path, n.images, n.labels);
    if (!s.empty()) return s;
    s = ReplaceInBaseName(path, n.labels, n.images);
    if (!s.empty()) return s;
  }
  for (const auto& n : kDottedNamings) {
    std::string s = ReplaceInBaseName(path, n.images, n.labels);
    if (!s.empty()) return s;
    s = ReplaceInBaseName(path, n.labels, n.images);
    if (!s.empty()) return s;
  }
  return "";
}

absl::StatusOr<Dataset> ParseIdx(std::string_view images_bytes, std::string_view images_name_view,
                                 std::string_view labels_bytes, std::string_view labels_name_view,
                                 const ParseLimits& limits) {
  const absl::string_view images_name = ToAbsl(images_name_view);
  const absl::string_view labels_name = ToAbsl(labels_name_view);
  // Raw input is parsed in place; only gzip input needs a buffer of its own.
  std::string images_inflated, labels_inflated;
  std::string_view images = images_bytes, labels = labels_bytes;
  if (LooksGzipped(images_bytes)) {
    ASSIGN_OR_RETURN(images_inflated,
                     Gunzip(images_bytes, images_name_view, limits.max_decompressed_bytes));
    images = images_inflated;
  }
  if (LooksGzipped(labels_bytes)) {
    ASSIGN_OR_RETURN(labels_inflated,
                     Gunzip(labels_bytes, labels_name_view, limits.max_decompressed_bytes));
    labels = labels_inflated;
  }
  ASSIGN_OR_RETURN(IdxHeader image_header, ParseHeader(images, images_name, 0, "images"));
  ASSIGN_OR_RETURN(IdxHeader label_header, ParseHeader(labels, labels_name, 1, "labels"));
  const uint64_t n = image_header.dims[0];
  if (n != label_header.dims[0]) {
    return absl::DataLossError(absl::StrCat("count mismatch: ", images_name, " holds ", n,
                                            " images but ", labels_name, " holds ",
                                            label_header.dims[0], " labels"));
  }

  Dataset dataset;
  dataset.example_shape.assign(image_header.dims.begin() + 1, image_header.dims.end());
  if (dataset.example_shape.size() == 2) dataset.example_shape.push_back(1);  // HWC, 1 channel
  dataset.num_examples = static_cast<int64_t>(n);

  std::array<float, 256> scale;
  for (int i = 0; i < 256; ++i) scale[i] = static_cast<float>(i) / 255.0f;
  const auto* pixels =
      reinterpret_cast<const unsigned char*>(images.data()) + image_header.header_bytes;
  dataset.features.resize(image_header.element_count);
  float* out = dataset.features.data();
  for (uint64_t i = 0; i < image_header.element_count; ++i) out[i] = scale[pixels[i]];

  const auto* label_bytes =
      reinterpret_cast<const unsigned char*>(labels.data()) + label_header.header_bytes;
  dataset.labels.assign(label_bytes, label_bytes + n);
  int32_t max_label = -1;
  for (int32_t label : dataset.labels) max_label = std::max(max_label, label);
  dataset.num_classes = max_label + 1;
  return dataset;
}

absl::StatusOr<Dataset> LoadIdx(const std::string& path) { return LoadIdx(path, ""); }

absl::StatusOr<Dataset> LoadIdx(const std::string& path, std::string_view prefer_prefix) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  if (std::filesystem::is_directory(status)) {
    std::vector<std::string> pairs;  // images file names with a labels file beside them
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      if (!IsImagesName(name) || !IsRegularFile(entry.path().string())) continue;
      for (const std::string& companion : CompanionCandidates(entry.path().string())) {
        if (IsRegularFile(companion)) {
          pairs.push_back(name);
          break;
        }
      }
    }
    if (ec) {
      return absl::InternalError(absl::StrCat(path, ": cannot list directory: ", ec.message()));
    }
    std::sort(pairs.begin(), pairs.end());
    if (pairs.size() > 1 && !prefer_prefix.empty()) {
      std::vector<std::string> preferred;
      for (const std::string& p : pairs) {
        if (p.starts_with(prefer_prefix)) preferred.push_back(p);
      }
      if (!preferred.empty()) pairs = std::move(preferred);
    }
    // The same pair stored both raw and gzipped counts once (the raw one, first in order).
    if (pairs.size() > 1) {
      const std::string stem =
          EndsWith(pairs[0], ".gz") ? pairs[0].substr(0, pairs[0].size() - 3) : pairs[0];
      if (std::all_of(pairs.begin(), pairs.end(),
                      [&](const std::string& p) { return p == stem || p == stem + ".gz"; })) {
        pairs.resize(1);
      }
    }
    if (pairs.empty()) {
      return absl::NotFoundError(
          absl::StrCat(path,
                       ": no IDX pair in this directory (an *-images-idx3-ubyte[.gz] file with its "
                       "*-labels-idx1-ubyte[.gz] beside it)"));
    }
    if (pairs.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": holds several IDX pairs (", absl::StrJoin(pairs, ", "),
          prefer_prefix.empty() ? "); name the images file"
                                : absl::StrCat(") and none or several start with '",
                                               ToAbsl(prefer_prefix), "'; name the images file")));
    }
    return LoadIdx((std::filesystem::path(path) / pairs[0]).string(), "");
  }

  const std::string file_name = std::filesystem::path(path).filename().string();
  const std::vector<std::string> candidates = CompanionCandidates(path);
  if (candidates.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": cannot find the labels file: the name does not follow the IDX convention "
                     "(<prefix>-images-idx3-ubyte[.gz] beside <prefix>-labels-idx1-ubyte[.gz])"));
  }
  for (const std::string& companion : candidates) {
    if (!IsRegularFile(companion)) continue;
    if (IsImagesName(file_name)) return LoadIdxPair(path, companion);
    return LoadIdxPair(companion, path);
  }
  return absl::NotFoundError(absl::StrCat(path, ": its companion IDX file is missing (looked for ",
                                          absl::StrJoin(candidates, " and "), ")"));
}

}  // namespace kubetrain::runtime::data
