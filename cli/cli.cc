#include "cli/cli.h"

#include <algorithm>
#include <optional>
#include <ostream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"

namespace kubetrain::cli {

const std::string* ParsedArgs::Flag(const std::string& name) const {
  for (auto it = flags.rbegin(); it != flags.rend(); ++it) {
    if (it->first == name) return &it->second;
  }
  return nullptr;
}

namespace {

// Single-dash names kubectl users type, for the long flags they stand for.
constexpr std::pair<char, const char*> kShortFlags[] = {{'n', "namespace"}};

// "-n NS", "-n=NS" and "-nNS" (pflag's forms) as "--namespace ...", when the
// command takes that flag; nullopt for anything else.
std::optional<std::string> LongFormOfShortFlag(const std::string& arg,
                                               const std::vector<std::string>& value_flags) {
  if (arg.size() < 2 || arg[0] != '-' || arg[1] == '-') return std::nullopt;
  for (const auto& [letter, name] : kShortFlags) {
    if (arg[1] != letter ||
        std::find(value_flags.begin(), value_flags.end(), name) == value_flags.end()) {
      continue;
    }
    if (arg.size() == 2) return std::string("--") + name;
    return std::string("--") + name + "=" + arg.substr(arg[2] == '=' ? 3 : 2);
  }
  return std::nullopt;
}

}  // namespace

ParsedArgs ParseArgs(const std::vector<std::string>& args,
                     const std::vector<std::string>& value_flags,
                     const std::vector<std::string>& bool_flags) {
  ParsedArgs parsed;
  auto known = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (std::optional<std::string> long_form = LongFormOfShortFlag(arg, value_flags)) {
      arg = *std::move(long_form);
    } else if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-' && absl::ascii_isalpha(arg[1])) {
      parsed.error = "unknown flag " + arg.substr(0, 2);
      return parsed;
    }
    if (arg == "--") {
      parsed.after_double_dash.assign(args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      parsed.positional.push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (known(bool_flags, name)) {
      if (eq != std::string::npos) {
        const std::string value = arg.substr(eq + 1);
        if (value != "true" && value != "false") {
          parsed.error = "flag --" + name + " takes true or false, got \"" + value + "\"";
          return parsed;
        }
        parsed.flags.emplace_back(name, value);
      } else {
        parsed.flags.emplace_back(name, "true");
      }
    } else if (known(value_flags, name)) {
      if (eq != std::string::npos) {
        parsed.flags.emplace_back(name, arg.substr(eq + 1));
      } else if (i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0) {
        parsed.flags.emplace_back(name, args[++i]);
      } else if (i + 1 < args.size()) {
        // `--job-dir --stream-logs` is a forgotten value, not a folder named
        // "--stream-logs"; a value that starts with "--" is given as --name=value.
        parsed.error = "flag --" + name + " needs a value, got " +
                       (args[i + 1] == "--" ? std::string("\"--\"") : "flag " + args[i + 1]) +
                       " (write --" + name + "=VALUE for a value that starts with --)";
        return parsed;
      } else {
        parsed.error = "flag --" + name + " needs a value";
        return parsed;
      }
    } else {
      parsed.error = "unknown flag --" + name;
      return parsed;
    }
  }
  return parsed;
}

namespace {

std::vector<Command> AllCommands() {
  std::vector<Command> commands;
  for (auto list : {ValidateCommands, JobsCommands, LocalCommands, RenderCommands, UiCommands}) {
    for (Command& command : list()) commands.push_back(std::move(command));
  }
  return commands;
}

void PrintUsage(const std::vector<Command>& commands, const std::string& program, std::ostream& out,
                const std::string& group = "") {
  out << "Usage: " << program << " " << (group.empty() ? "" : group + " ")
      << "COMMAND [FLAGS] [ARGS]\n\nCommands:\n";
  for (const Command& command : commands) {
    std::string words = absl::StrJoin(command.words, " ");
    words.resize(std::max<size_t>(words.size(), 28), ' ');
    out << "  " << words << command.summary << "\n";
  }
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
           const std::string& program) {
  const std::vector<Command> commands = AllCommands();
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    PrintUsage(commands, program, args.empty() ? err : out);
    return args.empty() ? kExitUsage : kExitOk;
  }
  // The longest command whose words start the command line.
  const Command* best = nullptr;
  for (const Command& command : commands) {
    if (command.words.size() > args.size()) continue;
    if (!std::equal(command.words.begin(), command.words.end(), args.begin())) continue;
    if (best == nullptr || command.words.size() > best->words.size()) best = &command;
  }
  if (best == nullptr) {
    // A command group ("jobs", "jobs submit", "local"): the words that start
    // some commands. Its --help, or the group alone, lists its commands.
    size_t group_words = 0;
    std::vector<Command> group;
    for (const Command& command : commands) {
      size_t n = 0;
      while (n < command.words.size() && n < args.size() && command.words[n] == args[n]) ++n;
      if (n == 0 || n == command.words.size()) continue;
      if (n > group_words) {
        group_words = n;
        group.clear();
      }
      if (n == group_words) group.push_back(command);
    }
    if (group_words > 0) {
      const std::string name = absl::StrJoin(args.begin(), args.begin() + group_words, " ");
      const bool help =
          group_words < args.size() && (args[group_words] == "--help" || args[group_words] == "-h");
      if (help) {
        PrintUsage(group, program, out, name);
        return kExitOk;
      }
      if (group_words == args.size()) {
        err << program << " " << name << ": name a command\n";
      } else {
        err << program << " " << name << ": unknown command \"" << args[group_words] << "\"\n";
      }
      PrintUsage(group, program, err, name);
      return kExitUsage;
    }
    err << "kubetrain: unknown command \""
        << absl::StrJoin(args.begin(), args.begin() + std::min<size_t>(args.size(), 3), " ")
        << "\"\n";
    PrintUsage(commands, program, err);
    return kExitUsage;
  }
  const std::vector<std::string> rest(args.begin() + best->words.size(), args.end());
  for (const std::string& arg : rest) {
    if (arg == "--") break;  // the trainer's own flags follow
    if (arg == "--help" || arg == "-h") {
      out << "Usage: " << program << " " << absl::StrJoin(best->words, " ")
          << (best->synopsis.empty() ? "" : " ") << best->synopsis << "\n\n"
          << best->summary << "\n";
      return kExitOk;
    }
  }
  return best->run(rest, out, err);
}

}  // namespace kubetrain::cli
