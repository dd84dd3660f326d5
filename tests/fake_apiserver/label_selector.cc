#include "tests/fake_apiserver/label_selector.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kubetrain::fake_apiserver {
namespace {

// Splits on commas that are not inside parentheses ("a in (x,y),b" is two).
std::vector<std::string> SplitRequirements(absl::string_view text) {
  std::vector<std::string> out;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  out.push_back(current);
  return out;
}

bool ValidKey(absl::string_view key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '/';
  });
}

}  // namespace

absl::StatusOr<LabelSelector> LabelSelector::Parse(absl::string_view text) {
  LabelSelector selector;
  if (absl::StripAsciiWhitespace(text).empty()) return selector;
  for (const std::string& raw : SplitRequirements(text)) {
    absl::string_view req = absl::StripAsciiWhitespace(raw);
    auto bad = [&] {
      return absl::InvalidArgumentError(
          absl::StrCat("labelSelector: invalid requirement \"", req, "\""));
    };
    Requirement r;
    size_t pos;
    if ((pos = req.find(" notin ")) != absl::string_view::npos ||
        (pos = req.find(" in ")) != absl::string_view::npos) {
      bool notin = req.substr(pos, 7) == " notin ";
      r.key = std::string(absl::StripAsciiWhitespace(req.substr(0, pos)));
      absl::string_view set = absl::StripAsciiWhitespace(req.substr(pos + (notin ? 7 : 4)));
      if (!absl::ConsumePrefix(&set, "(") || !absl::ConsumeSuffix(&set, ")")) return bad();
      for (absl::string_view v : absl::StrSplit(set, ',')) {
        r.values.emplace_back(absl::StripAsciiWhitespace(v));
      }
      r.op = notin ? Op::kNotIn : Op::kIn;
    } else if ((pos = req.find("!=")) != absl::string_view::npos) {
      r.key = std::string(req.substr(0, pos));
      r.values = {std::string(req.substr(pos + 2))};
      r.op = Op::kNotIn;
    } else if ((pos = req.find("==")) != absl::string_view::npos) {
      r.key = std::string(req.substr(0, pos));
      r.values = {std::string(req.substr(pos + 2))};
      r.op = Op::kIn;
    } else if ((pos = req.find('=')) != absl::string_view::npos) {
      r.key = std::string(req.substr(0, pos));
      r.values = {std::string(req.substr(pos + 1))};
      r.op = Op::kIn;
    } else if (absl::ConsumePrefix(&req, "!")) {
      r.key = std::string(req);
      r.op = Op::kDoesNotExist;
    } else {
      r.key = std::string(req);
      r.op = Op::kExists;
    }
    if (!ValidKey(r.key)) return bad();
    selector.requirements_.push_back(std::move(r));
  }
  return selector;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const Requirement& r : requirements_) {
    auto it = labels.find(r.key);
    bool has = it != labels.end();
    switch (r.op) {
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kDoesNotExist:
        if (has) return false;
        break;
      case Op::kIn:
        if (!has || std::find(r.values.begin(), r.values.end(), it->second) == r.values.end()) {
          return false;
        }
        break;
      case Op::kNotIn:
        if (has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end()) {
          return false;
        }
        break;
    }
  }
  return true;
}

}  // namespace kubetrain::fake_apiserver
