#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer-runtime/data/dataset.h"
#include "trainer-runtime/data/file_io.h"

namespace kubetrain::runtime::data {
namespace {

// Labels index one-hot targets and output units; anything this large is a
// mistake in the file (a feature taken for the label), not a class count.
constexpr int64_t kMaxLabel = 1 << 20;

std::string_view Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r\f\v");
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(" \t\r\f\v");
  return s.substr(begin, end - begin + 1);
}

bool ParseFloat(std::string_view field, float* out) {
  field = Trim(field);
  if (!field.empty() && field.front() == '+') field.remove_prefix(1);
  if (field.empty()) return false;
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), *out);
  return ec == std::errc() && ptr == field.data() + field.size();
}

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

}  // namespace

absl::StatusOr<Dataset> ParseCsv(std::string_view content, std::string_view name_view) {
  const absl::string_view name = ToAbsl(name_view);
  Dataset dataset;
  size_t columns = 0;
  int32_t max_label = -1;
  int64_t line_number = 0;
  bool first_row = true;
  std::vector<float> row;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (Trim(line).empty()) continue;

    const std::vector<std::string_view> fields = SplitFields(line);
    row.resize(fields.size());
    size_t bad_column = 0;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (!ParseFloat(fields[i], &row[i]) || !std::isfinite(row[i])) {
        bad_column = i + 1;
        break;
      }
    }
    if (first_row) {
      first_row = false;
      if (bad_column != 0) continue;  // a header line
    }
    if (bad_column != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ":", line_number, ": column ", bad_column, " is not a finite number: '",
          ToAbsl(Trim(fields[bad_column - 1]).substr(0, 40)), "'"));
    }
    if (columns == 0) {
      if (fields.size() < 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ":", line_number, ": a row needs at least one feature and a label column"));
      }
      columns = fields.size();
    } else if (fields.size() != columns) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", line_number, ": ", fields.size(),
                                                     " columns, earlier rows have ", columns));
    }
    const float label = row.back();
    if (label < 0 || label > kMaxLabel || label != std::floor(label)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ":", line_number, ": label (column ", columns, ") must be an integer in [0, ",
          kMaxLabel, "], got ", ToAbsl(Trim(fields.back()).substr(0, 40))));
    }
    dataset.features.insert(dataset.features.end(), row.begin(), row.end() - 1);
    dataset.labels.push_back(static_cast<int32_t>(label));
    max_label = std::max(max_label, dataset.labels.back());
  }
  if (columns == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no data rows"));
  }
  dataset.example_shape = {static_cast<int64_t>(columns - 1)};
  dataset.num_examples = static_cast<int64_t>(dataset.labels.size());
  dataset.num_classes = max_label + 1;
  return dataset;
}

absl::StatusOr<Dataset> LoadCsv(const std::string& path) {
  ASSIGN_OR_RETURN(std::string content, ReadFileToString(path));
  return ParseCsv(content, path);
}

}  // namespace kubetrain::runtime::data
