#include "common/hypertune/hypertune.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kubetrain::hypertune {
namespace {

// Python's json.dumps(s) with ensure_ascii=True: non-ASCII as \uXXXX
// (lowercase hex, surrogate pairs above U+FFFF). Invalid UTF-8 bytes become
// U+FFFD, as a Python str cannot hold them.
std::string PythonJsonString(std::string_view s) {
  std::string out = "\"";
  const auto escape = [&out](uint32_t unit) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", unit);
    out += buf;
  };
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            escape(c);
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    int length = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    uint32_t cp = length == 4 ? c & 0x07 : length == 3 ? c & 0x0f : c & 0x1f;
    bool valid = length > 0 && c < 0xf5 && i + length <= s.size();
    for (int k = 1; valid && k < length; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      valid = (cc & 0xc0) == 0x80;
      cp = cp << 6 | (cc & 0x3f);
    }
    // Overlong forms and UTF-16 surrogates are not valid UTF-8.
    if (valid &&
        ((length == 2 && cp < 0x80) || (length == 3 && cp < 0x800) ||
         (length == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))) {
      valid = false;
    }
    if (!valid) {
      escape(0xfffd);
      ++i;
      continue;
    }
    if (cp > 0xffff) {
      cp -= 0x10000;
      escape(0xd800 + (cp >> 10));
      escape(0xdc00 + (cp & 0x3ff));
    } else {
      escape(cp);
    }
    i += length;
  }
  out += '"';
  return out;
}

bool ParseDouble(std::string_view s, double* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// A JSON number, or a string that holds one ("0.987", "nan").
bool NumberOf(const nlohmann::json& v, double* out) {
  if (v.is_number()) {
    *out = v.get<double>();
    return true;
  }
  if (v.is_string()) return ParseDouble(v.get_ref<const std::string&>(), out);
  return false;
}

std::optional<HypertuneReport> ParseLine(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), /*cb=*/nullptr,
                                           /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;  // also covers a discarded (invalid) parse
  HypertuneReport report;
  for (const auto& [key, value] : j.items()) {
    double number = 0;
    if (key == "timestamp") {
      if (!NumberOf(value, &report.timestamp)) return std::nullopt;
    } else if (key == "trial") {
      if (value.is_string()) {
        report.trial = value.get<std::string>();
      } else if (value.is_number_integer()) {
        report.trial = value.dump();
      }
    } else if (key == "global_step") {
      if (NumberOf(value, &number) && std::isfinite(number) && number == std::floor(number) &&
          std::fabs(number) < 9.2e18) {
        report.global_step = static_cast<int64_t>(number);
      }
    } else if (NumberOf(value, &number)) {
      report.metrics[key] = number;
    } else if (key == "final") {
      report.final = value.is_string() && value.get<std::string>() == "true";
    }
  }
  report.key = j.dump();
  return report;
}

}  // namespace

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest round-trip digits, in scientific form: d[.ddd]e[+-]XX.
  const auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exponent);
  const int decpt = exponent + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt < n) {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    } else {
      out += digits + std::string(decpt - n, '0') + ".0";
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

std::string FormatHypertuneLine(std::string_view tag, double value,
                                std::optional<int64_t> global_step, std::string_view trial,
                                double timestamp, bool final) {
  // The library builds {'timestamp', 'trial', tag, 'global_step'} in that
  // order, so a tag equal to one of those names is overwritten or overwrites
  // the same way here; json.dumps(sort_keys=True) then orders by code point,
  // which is byte order for UTF-8.
  std::map<std::string, std::string> fields;  // key -> JSON text of the value
  fields["timestamp"] = PythonFloatRepr(timestamp);
  fields["trial"] = PythonJsonString(trial);
  fields[std::string(tag.empty() ? std::string_view(kDefaultMetricTag) : tag)] =
      PythonJsonString(PythonFloatRepr(value));
  fields["global_step"] =
      PythonJsonString(std::to_string(global_step.has_value() ? *global_step : 0));
  if (final) fields["final"] = PythonJsonString("true");
  std::string line = "{";
  for (const auto& [key, json] : fields) {
    if (line.size() > 1) line += ", ";
    line += PythonJsonString(key) + ": " + json;
  }
  return line + "}\n";
}

std::vector<HypertuneReport> ParseHypertuneFile(std::string_view content, size_t* skipped) {
  std::vector<HypertuneReport> reports;
  size_t bad = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    // A last line without its newline is accepted only if it parses: a
    // strict prefix of a JSON object is never a complete JSON object.
    std::optional<HypertuneReport> report = ParseLine(line);
    if (report.has_value()) {
      reports.push_back(std::move(*report));
    } else {
      ++bad;
    }
  }
  if (skipped != nullptr) *skipped = bad;
  return reports;
}

HypertuneFileFollower::HypertuneFileFollower(size_t remembered)
    : remembered_(std::max(remembered, kMaxReportsKept)) {}

std::vector<HypertuneReport> HypertuneFileFollower::Poll(std::string_view content) {
  std::vector<HypertuneReport> fresh;
  for (HypertuneReport& report : ParseHypertuneFile(content)) {
    if (!seen_.insert(report.key).second) continue;
    order_.push_back(report.key);
    if (order_.size() > remembered_) {
      seen_.erase(order_.front());
      order_.pop_front();
    }
    fresh.push_back(std::move(report));
  }
  return fresh;
}

absl::StatusOr<std::vector<HypertuneReport>> HypertuneFileFollower::PollFile(
    const std::string& path) {
  absl::StatusOr<std::string> content = ReadHypertuneFile(path);
  if (!content.ok()) return content.status();
  return Poll(*content);
}

namespace {

// The whole file, or nullopt when it does not exist.
absl::StatusOr<std::optional<std::string>> ReadOnce(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    if (errno == ENOENT) return std::optional<std::string>();
    return absl::InternalError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::string content;
  char buffer[8192];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) content.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (failed) return absl::InternalError(absl::StrCat(path, ": read failed: ", std::strerror(err)));
  return std::optional<std::string>(std::move(content));
}

}  // namespace

absl::StatusOr<std::string> ReadHypertuneFile(const std::string& path) {
  constexpr int kMaxTries = 5;
  std::optional<std::string> previous;
  for (int attempt = 0; attempt < kMaxTries; ++attempt) {
    absl::StatusOr<std::optional<std::string>> current = ReadOnce(path);
    if (!current.ok()) return current.status();
    if (!current->has_value()) return std::string();
    if (previous.has_value() && **current == *previous) return std::move(*previous);
    previous = std::move(**current);
  }
  // Still changing: the parser skips whatever lines a racing rewrite broke,
  // and the next poll sees the settled file.
  return std::move(*previous);
}

HypertuneWriter::Options HypertuneWriter::OptionsFromEnvironment() {
  Options options;
  if (const char* path = std::getenv(kMetricFileEnv); path != nullptr && *path != '\0') {
    options.metric_path = path;
  }
  if (const char* trial = std::getenv(kTrialIdEnv); trial != nullptr) options.trial_id = trial;
  return options;
}

absl::StatusOr<std::unique_ptr<HypertuneWriter>> HypertuneWriter::Create(Options options) {
  const std::filesystem::path parent = std::filesystem::path(options.metric_path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat(options.metric_path, ": cannot create its directory: ", ec.message()));
    }
  }
  return std::unique_ptr<HypertuneWriter>(new HypertuneWriter(std::move(options)));
}

std::string HypertuneWriter::Content() const {
  std::string content;
  for (const std::string& line : lines_) content += line;
  return content;
}

absl::Status HypertuneWriter::Report(std::string_view tag, double value,
                                     std::optional<int64_t> global_step, double timestamp,
                                     bool final) {
  lines_.push_back(
      FormatHypertuneLine(tag, value, global_step, options_.trial_id, timestamp, final));
  if (lines_.size() > kMaxReportsKept) lines_.pop_front();
  const std::string content = Content();
  std::FILE* file = std::fopen(options_.metric_path.c_str(), "w");
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat(options_.metric_path, ": cannot open for writing: ", std::strerror(errno)));
  }
  const bool wrote = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  const int err = errno;
  if (std::fclose(file) != 0 || !wrote) {
    return absl::InternalError(
        absl::StrCat(options_.metric_path, ": write failed: ", std::strerror(wrote ? errno : err)));
  }
  return absl::OkStatus();
}

absl::Status HypertuneWriter::Report(std::string_view tag, double value,
                                     std::optional<int64_t> global_step) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return Report(tag, value, global_step, now);
}

}  // namespace kubetrain::hypertune
