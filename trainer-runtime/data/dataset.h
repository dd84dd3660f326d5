#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::runtime::data {

// A labelled classification dataset held in memory. Plain value type: no
// invariants are enforced by the struct itself; the loaders below always
// return a consistent one (features.size() == num_examples * example_size(),
// labels.size() == num_examples, every label in [0, num_classes)).
struct Dataset {
  std::vector<int64_t> example_shape;  // {28, 28, 1} for IDX images (HWC); {n} for CSV features
  int64_t num_examples = 0;
  std::vector<float> features;   // num_examples * example_size(), row-major; IDX pixels in [0,1]
  std::vector<int32_t> labels;   // num_examples
  int32_t num_classes = 0;       // max label + 1 (10 for Fashion-MNIST)
  int64_t example_size() const;  // product of example_shape
};

// Loads an IDX images/labels pair (MNIST / Fashion-MNIST format, gzip or raw).
//
// `path` names the images file, e.g. .../train-images-idx3-ubyte.gz; the
// labels file is found beside it by the standard naming
// (-images-idx3-ubyte -> -labels-idx1-ubyte, also .idx3-ubyte -> .idx1-ubyte),
// with or without .gz whatever the images file has. Naming the labels file
// works the same way in reverse. `path` may also be a directory holding
// exactly one such pair, or several pairs of which the one whose file name
// starts with `prefer_prefix` (e.g. "train" or "t10k") is taken.
//
// Images are stored HWC with one channel, pixels scaled by 1/255; labels must
// be < 256 (IDX ubyte). Errors name the file and what is wrong: NOT_FOUND
// (missing file, no pair in a directory), INVALID_ARGUMENT (several pairs and
// no prefix to choose), DATA_LOSS (truncated, bad magic, corrupt gzip, counts
// of images and labels differ).
absl::StatusOr<Dataset> LoadIdx(const std::string& path);
absl::StatusOr<Dataset> LoadIdx(const std::string& path, std::string_view prefer_prefix);

// Loads a CSV file of numeric features whose last column is the integer label
// (>= 0). A first line that does not parse as numbers is taken as a header.
// Blank lines are skipped; every other row must have the same number of
// columns. Errors (INVALID_ARGUMENT / NOT_FOUND) name the file, line and column.
absl::StatusOr<Dataset> LoadCsv(const std::string& path);

// Chooses the loader by name: *.csv -> LoadCsv, *.tfrecord -> LoadExampleTFRecord
// (see example_format.h), anything else (a file or a directory) -> LoadIdx.
absl::StatusOr<Dataset> LoadDataset(const std::string& path);
// Same, passing `prefer_prefix` to LoadIdx for a directory holding several
// IDX pairs (e.g. "train" for training data, "t10k" for Fashion-MNIST's test
// set).
absl::StatusOr<Dataset> LoadDataset(const std::string& path, std::string_view prefer_prefix);

// In-memory entry points, used by the loaders above and by fuzzers. They never
// touch the file system; `*_name` only appears in error messages.
struct ParseLimits {
  // Cap on the decompressed size of each input (guards against gzip bombs).
  size_t max_decompressed_bytes = size_t{4} << 30;
};
absl::StatusOr<Dataset> ParseIdx(std::string_view images_bytes, std::string_view images_name,
                                 std::string_view labels_bytes, std::string_view labels_name,
                                 const ParseLimits& limits = {});
absl::StatusOr<Dataset> ParseCsv(std::string_view content, std::string_view name);

// The labels file name that goes with an IDX images file name (or the images
// name for a labels name); empty when the name follows neither convention.
std::string IdxCompanionPath(std::string_view path);

}  // namespace kubetrain::runtime::data
