#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace kubetrain::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// One flag a command takes: ParseArgs reads it and `--help` lists it, so the
// two cannot disagree.
struct FlagSpec {
  std::string name;   // the long name, without "--"
  std::string value;  // the value's name in help ("DIR"); "" for a true/false switch
  std::string help;   // one line; says the default where there is one
};

// One command of the `kubetrain` tool, found by its words ("jobs describe").
struct Command {
  std::vector<std::string> words;
  std::string summary;
  std::function<int(const std::vector<std::string>& args, std::ostream& out, std::ostream& err)>
      run;
  // What follows the words: arguments and flags, for `--help`.
  std::string synopsis;
  // Every flag it takes, in the order `--help` lists them.
  std::vector<FlagSpec> flags{};
};

// Each file of commands exports its list; cli.cc joins them.
std::vector<Command> ValidateCommands();  // validate, version
std::vector<Command> JobsCommands();      // jobs submit training/describe/list/cancel/stream-logs
std::vector<Command> LocalCommands();     // local serve, local train
std::vector<Command> RenderCommands();    // render
std::vector<Command> UiCommands();        // ui
// All of them, in that order.
std::vector<Command> AllCommands();

// Splits "--name=value" / "--name value" flags from positional arguments.
// `bool_flags` take no value. Unknown flags are errors naming the flag.
struct ParsedArgs {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> flags;  // in order given
  std::vector<std::string> after_double_dash;              // user args after "--"
  std::string error;
  const std::string* Flag(const std::string& name) const;  // last value given
  bool Has(const std::string& name) const { return Flag(name) != nullptr; }
  // A true/false flag: its last occurrence is --name or --name=true.
  bool Switch(const std::string& name) const {
    const std::string* value = Flag(name);
    return value != nullptr && *value == "true";
  }
};
ParsedArgs ParseArgs(const std::vector<std::string>& args,
                     const std::vector<std::string>& value_flags,
                     const std::vector<std::string>& bool_flags);
// The same with a command's flags.
ParsedArgs ParseArgs(const std::vector<std::string>& args, const std::vector<FlagSpec>& flags);

// The flags that pick where jobs are, as kubectl's do: --local, -n/--namespace,
// --context, --kubeconfig.
std::vector<FlagSpec> BackendFlags();

// The "Flags:" section of a command's `--help`: one line each, aligned, the
// short form before the long one; "" when it takes none.
std::string FlagsHelp(const std::vector<FlagSpec>& flags);

}  // namespace kubetrain::cli
