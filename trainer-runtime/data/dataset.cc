#include "trainer-runtime/data/dataset.h"

#include <string>

#include "absl/strings/match.h"
#include "trainer-runtime/data/example_format.h"

namespace kubetrain::runtime::data {

int64_t Dataset::example_size() const {
  int64_t size = 1;
  for (int64_t d : example_shape) size *= d;
  return size;
}

absl::StatusOr<Dataset> LoadDataset(const std::string& path) { return LoadDataset(path, ""); }

absl::StatusOr<Dataset> LoadDataset(const std::string& path, std::string_view prefer_prefix) {
  if (absl::EndsWithIgnoreCase(path, ".csv")) return LoadCsv(path);
  if (absl::EndsWithIgnoreCase(path, ".tfrecord")) return LoadExampleTFRecord(path);
  return LoadIdx(path, prefer_prefix);
}

}  // namespace kubetrain::runtime::data
