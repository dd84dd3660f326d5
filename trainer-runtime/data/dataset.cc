#include "trainer-runtime/data/dataset.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::runtime::data {

int64_t Dataset::example_size() const {
  int64_t size = 1;
  for (int64_t d : example_shape) size *= d;
  return size;
}

absl::StatusOr<Dataset> LoadDataset(const std::string& path) {
  if (absl::EndsWithIgnoreCase(path, ".csv")) return LoadCsv(path);
  if (absl::EndsWithIgnoreCase(path, ".tfrecord")) {
    return absl::UnimplementedError(absl::StrCat(path, ": TFRecord datasets are not supported yet"));
  }
  return LoadIdx(path);
}

}  // namespace kubetrain::runtime::data
