#pragma once

// What kubetrain's three binaries (kubetrain, kubetrain-operator,
// kubetrain-runtime) share in parsing their flags with CLI11: one form of
// help, with each flag's default taken from the flag itself, and one wording
// of the errors users have always seen.

#include <string>

#include "CLI/CLI.hpp"

namespace kubetrain::flags {

// Help in one form: the app's description (its usage line, e.g.
// "usage: kubetrain-operator [flags]"), then one line per flag,
//
//   --name VALUE                 what it is (default X)
//
// where VALUE is the option's type name ("=BOOL" and "[=BOOL]" are written
// joined to the name: --leader-elect=BOOL) and X its default string
// (Option::default_str or capture_default_str), so help never repeats a
// default by hand. A description may hold '\n': its lines are indented under
// the first. The app's footer follows the flags.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
};

// The group of an option that parses but that help does not list: a second
// spelling (--batch-size beside --batch_size), which help mentions once for
// all. (CLI11's own hidden group, "", would also drop the name from errors.)
inline constexpr char kUnlistedGroup[] = "unlisted";

// Sets up `app` the way every kubetrain binary parses: the HelpFormatter
// with descriptions from column `column` on, and the last of a repeated flag
// wins (as the hand-written parsers did).
void Configure(CLI::App& app, int column = 31);

// A flag's callback (add_option_function) refusing a value: the message is
// shown as it is, so it names the flag itself ("--leader-elect must be true
// or false"). A check (Option::check) returns its message instead, and
// CLI11 puts the flag's name in front.
[[noreturn]] void Reject(const std::string& message);

// What went wrong in a parse, for a binary that words it its own way.
struct ParseProblem {
  enum class Kind { kUnknownFlag, kUnexpectedArgument, kMissingValue, kOther };
  Kind kind = Kind::kOther;
  // The flag as typed, without "=value" ("--name"), or the argument; for
  // kOther the whole message (Reject's, or a check's "--name: message").
  std::string subject;
};
ParseProblem Classify(const CLI::App& app, const CLI::ParseError& error);

// The words users have always seen for what CLI11 reports while `app`
// parses: "unknown flag --name" (an extra that starts with '-'),
// "unexpected argument X" (another extra), "--name needs a value" (a flag
// given last without its value); anything else (Reject's message, a check's
// "--name: message") in CLI11's what().
std::string Describe(const CLI::App& app, const CLI::ParseError& error);

}  // namespace kubetrain::flags
