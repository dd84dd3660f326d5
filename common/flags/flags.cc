#include "common/flags/flags.h"

#include <sstream>
#include <vector>

namespace kubetrain::flags {
namespace {

// How wide a description's lines may grow, after the flag's column.
constexpr size_t kLineWidth = 60;

}  // namespace

std::string HelpFormatter::make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const {
  std::stringstream out;
  if (!app->get_description().empty()) out << app->get_description() << "\n";
  for (const CLI::Option* opt : app->get_options([app](const CLI::Option* o) {
         return o->nonpositional() && o != app->get_help_ptr() && !o->get_group().empty() &&
                o->get_group() != kUnlistedGroup;
       })) {
    out << make_option(opt, false);
  }
  if (!app->get_footer().empty()) out << app->get_footer() << "\n";
  return out.str();
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  const std::string type = opt->get_type_name();
  if (type.empty()) return "";
  // "=BOOL", "[=BOOL]": a flag whose value, when given, is joined to it.
  return type[0] == '=' || type[0] == '[' ? type : " " + type;
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
  std::string desc = opt->get_description();
  if (opt->get_default_str().empty()) return desc;
  const std::string shown = "(default " + opt->get_default_str() + ")";
  if (desc.empty()) return shown;
  // On a line of its own where it would make the last line long.
  const size_t last_line = desc.size() - (desc.rfind('\n') + 1);
  return desc + (last_line + 1 + shown.size() > kLineWidth ? "\n" : " ") + shown;
}

void Configure(CLI::App& app, int column) {
  auto formatter = std::make_shared<HelpFormatter>();
  formatter->column_width(static_cast<std::size_t>(column));
  app.formatter(formatter);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

void Reject(const std::string& message) { throw CLI::ValidationError(message); }

ParseProblem Classify(const CLI::App& app, const CLI::ParseError& error) {
  using Kind = ParseProblem::Kind;
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    std::vector<std::string> extras = app.remaining();
    if (!extras.empty()) {
      const std::string& extra = extras.front();
      if (extra.size() > 1 && extra[0] == '-') {
        return {Kind::kUnknownFlag, extra.substr(0, extra.find('='))};
      }
      return {Kind::kUnexpectedArgument, extra};
    }
  }
  // "--name: 1 required TYPE missing": the flag came last, without its value.
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr) {
    const std::string what = error.what();
    const std::string tail = " missing";
    if (what.find(" required ") != std::string::npos && what.size() > tail.size() &&
        what.compare(what.size() - tail.size(), tail.size(), tail) == 0) {
      return {Kind::kMissingValue, what.substr(0, what.find(':'))};
    }
  }
  return {Kind::kOther, error.what()};
}

std::string Describe(const CLI::App& app, const CLI::ParseError& error) {
  ParseProblem problem = Classify(app, error);
  switch (problem.kind) {
    case ParseProblem::Kind::kUnknownFlag:
      return "unknown flag " + problem.subject;
    case ParseProblem::Kind::kUnexpectedArgument:
      return "unexpected argument " + problem.subject;
    case ParseProblem::Kind::kMissingValue:
      return problem.subject + " needs a value";
    case ParseProblem::Kind::kOther:
      break;
  }
  return problem.subject;
}

}  // namespace kubetrain::flags
