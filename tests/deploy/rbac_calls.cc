#include "tests/deploy/rbac_calls.h"

#include <algorithm>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "yaml-cpp/yaml.h"

namespace kubetrain::deploy_testing {
namespace {

// Comments become spaces (line numbers and offsets stay), string literals stay.
std::string StripComments(const std::string& text) {
  std::string out = text;
  enum { kCode, kLine, kBlock, kString, kChar } state = kCode;
  for (size_t i = 0; i < out.size(); ++i) {
    char c = out[i], next = i + 1 < out.size() ? out[i + 1] : '\0';
    switch (state) {
      case kCode:
        if (c == '/' && next == '/') {
          state = kLine;
          out[i] = ' ';
        } else if (c == '/' && next == '*') {
          state = kBlock;
          out[i] = out[i + 1] = ' ';
          ++i;
        } else if (c == '"') {
          state = kString;
        } else if (c == '\'') {
          state = kChar;
        }
        break;
      case kLine:
        if (c == '\n') {
          state = kCode;
        } else {
          out[i] = ' ';
        }
        break;
      case kBlock:
        if (c == '*' && next == '/') {
          out[i] = out[i + 1] = ' ';
          ++i;
          state = kCode;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
      case kString:
      case kChar:
        if (c == '\\') {
          ++i;
        } else if ((state == kString && c == '"') || (state == kChar && c == '\'')) {
          state = kCode;
        }
        break;
    }
  }
  return out;
}

int LineOf(const std::string& text, size_t offset) {
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
}

// The arguments of the call whose '(' is at `open`, split at top-level commas.
std::vector<std::string> Arguments(const std::string& text, size_t open) {
  std::vector<std::string> args;
  int depth = 0;
  std::string current;
  for (size_t i = open; i < text.size(); ++i) {
    char c = text[i];
    if (c == '(' || c == '{' || c == '[') {
      if (depth++ > 0) current += c;
    } else if (c == ')' || c == '}' || c == ']') {
      if (--depth == 0) {
        args.push_back(std::string(absl::StripAsciiWhitespace(current)));
        return args;
      }
      current += c;
    } else if (c == ',' && depth == 1) {
      args.push_back(std::string(absl::StripAsciiWhitespace(current)));
      current.clear();
    } else {
      current += c;
    }
  }
  return args;
}

// [begin, end) of the outermost brace block around `offset` that is a
// function body (depth 1 in a namespace counts: we take the block whose
// opening brace follows a ')' or a ')' and qualifiers, i.e. the outermost
// non-namespace block).
std::pair<size_t, size_t> EnclosingFunction(const std::string& text, size_t offset) {
  std::vector<size_t> opens;
  size_t begin = 0, end = text.size();
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '{') opens.push_back(i);
    if (text[i] == '}' && !opens.empty()) opens.pop_back();
  }
  for (size_t open : opens) {
    // Skip namespace blocks: the text before the brace names a namespace.
    size_t line_start = text.rfind('\n', open);
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    std::string head = text.substr(line_start, open - line_start);
    if (absl::StrContains(head, "namespace")) continue;
    begin = open;
    break;
  }
  int depth = 0;
  for (size_t i = begin; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) {
      end = i + 1;
      break;
    }
  }
  return {begin, end};
}

std::set<std::string> ConstantsIn(const std::string& text,
                                  const std::map<std::string, std::string>& resources,
                                  const std::string& prefix) {
  std::set<std::string> found;
  for (const auto& [name, unused] : resources) {
    std::regex pattern(prefix + "\\b" + name + "\\b");
    if (std::regex_search(text, pattern)) found.insert(name);
  }
  return found;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ParseResourceConstants(
    const std::string& header_text) {
  std::map<std::string, std::string> out;
  static const std::regex kConstant(
      R"re(const\s+Resource\s+(k\w+)\s*\{\s*"([^"]+)"\s*,\s*"([^"]+)")re");
  const std::string text = StripComments(header_text);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kConstant);
       it != std::sregex_iterator(); ++it) {
    const std::string prefix = (*it)[2], plural = (*it)[3];
    std::string group;
    if (prefix == "api/v1") {
      group = "";
    } else if (std::vector<std::string> parts = absl::StrSplit(prefix, '/');
               parts.size() == 3 && parts[0] == "apis") {
      group = parts[1];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("resource ", (*it)[1].str(), ": unknown API prefix '", prefix, "'"));
    }
    out[(*it)[1]] = absl::StrCat(group, "/", plural);
  }
  if (out.empty()) return absl::NotFoundError("no `const Resource kX{...}` constants found");
  return out;
}

absl::StatusOr<std::map<Permission, std::vector<CallSite>>> ExtractPermissions(
    const std::map<std::string, std::string>& sources,
    const std::map<std::string, std::string>& resources) {
  static const std::map<std::string, std::string> kVerbs = {
      {"Get", "get"},       {"List", "list"},        {"Watch", "watch"},  {"Create", "create"},
      {"Update", "update"}, {"MergePatch", "patch"}, {"Delete", "delete"}};
  static const std::regex kCall(
      R"re(\b(\w*[Cc]lient\w*(?:\(\))?)\s*(?:->|\.)\s*(Get|List|Watch|Create|Update|MergePatch|Delete)\s*\()re");

  // What the informers are built with: statements naming an Informer and a
  // resource constant.
  std::set<std::string> informer_resources;
  for (const auto& [file, raw] : sources) {
    const std::string text = StripComments(raw);
    for (absl::string_view statement : absl::StrSplit(text, ';')) {
      if (!absl::StrContains(statement, "nformer")) continue;
      for (const std::string& c : ConstantsIn(std::string(statement), resources, "")) {
        informer_resources.insert(c);
      }
    }
  }

  std::map<Permission, std::vector<CallSite>> out;
  for (const auto& [file, raw] : sources) {
    const std::string text = StripComments(raw);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kCall);
         it != std::sregex_iterator(); ++it) {
      const size_t open = it->position(0) + it->length(0) - 1;
      const std::string method = (*it)[2];
      std::vector<std::string> args = Arguments(text, open);
      CallSite site{
          file, LineOf(text, it->position(0)),
          absl::StrCat((*it)[1].str(), "->", method, "(", absl::StrJoin(args, ", "), ")")};
      auto where = [&] { return absl::StrCat(site.file, ":", site.line, ": ", site.text); };
      if (args.empty() || args[0].empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where(), ": no resource argument"));
      }

      std::set<std::string> constants;
      const std::string& resource_arg = args[0];
      if (resources.count(resource_arg) > 0) {
        constants.insert(resource_arg);
      } else {
        auto [begin, end] = EnclosingFunction(text, it->position(0));
        constants = ConstantsIn(text.substr(begin, end - begin), resources, "=\\s*&\\s*");
        if (constants.empty() && absl::StrContains(resource_arg, "options_.resource")) {
          constants = informer_resources;
        }
      }
      if (constants.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), ": cannot tell which resource this call uses; name a Resource constant"));
      }

      std::string subresource;
      if (method == "Update" || method == "MergePatch") {
        const std::string& status_arg = args.back();
        if (status_arg == "true") {
          subresource = "/status";
        } else if (status_arg != "false") {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": the status argument is not a literal true/false"));
        }
      }
      for (const std::string& c : constants) {
        out[{kVerbs.at(method), resources.at(c) + subresource}].push_back(site);
      }
    }
  }
  return out;
}

absl::StatusOr<std::set<Permission>> GrantedPermissions(const std::string& rules_yaml) {
  YAML::Node rules;
  try {
    rules = YAML::Load(rules_yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("rules: ", e.what()));
  }
  if (!rules.IsSequence()) return absl::InvalidArgumentError("rules: not a list");
  std::set<Permission> out;
  for (size_t i = 0; i < rules.size(); ++i) {
    const YAML::Node& rule = rules[i];
    const std::string where = absl::StrCat("rules[", i, "]");
    if (rule["resourceNames"] || rule["nonResourceURLs"]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": resourceNames/nonResourceURLs are not expected"));
    }
    if (!rule["apiGroups"].IsSequence() || !rule["resources"].IsSequence() ||
        !rule["verbs"].IsSequence()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": needs apiGroups, resources and verbs lists"));
    }
    for (const auto& group : rule["apiGroups"]) {
      for (const auto& resource : rule["resources"]) {
        for (const auto& verb : rule["verbs"]) {
          std::string g = group.as<std::string>(), r = resource.as<std::string>(),
                      v = verb.as<std::string>();
          if (g == "*" || r == "*" || v == "*" || absl::StrContains(r, "/*")) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": wildcard in ", g, "/", r, " ", v));
          }
          out.insert({v, absl::StrCat(g, "/", r)});
        }
      }
    }
  }
  return out;
}

}  // namespace kubetrain::deploy_testing
