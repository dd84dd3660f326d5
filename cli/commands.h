#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace kubetrain::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// One command of the `kubetrain` tool, found by its words ("jobs describe").
struct Command {
  std::vector<std::string> words;
  std::string summary;
  std::function<int(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)>
      run;
  // What follows the words: arguments and flags, for `--help`.
  std::string synopsis;
};

// Each file of commands exports its list; cli.cc joins them.
std::vector<Command> ValidateCommands();  // validate, version
std::vector<Command> JobsCommands();      // jobs submit training/describe/list/cancel/stream-logs
std::vector<Command> LocalCommands();     // local serve, local train
std::vector<Command> RenderCommands();    // render
std::vector<Command> UiCommands();        // ui

// Splits "--name=value" / "--name value" flags from positional arguments.
// `bool_flags` take no value. Unknown flags are errors naming the flag.
struct ParsedArgs {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> flags;  // in order given
  std::vector<std::string> after_double_dash;              // user args after "--"
  std::string error;
  const std::string* Flag(const std::string& name) const;  // last value given
  bool Has(const std::string& name) const { return Flag(name) != nullptr; }
};
ParsedArgs ParseArgs(const std::vector<std::string>& args,
                     const std::vector<std::string>& value_flags,
                     const std::vector<std::string>& bool_flags);

}  // namespace kubetrain::cli
