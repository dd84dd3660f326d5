#include "cli/cli.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <utility>

#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "common/flags/flags.h"

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

bool Listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool StartsWithDashes(const std::string& word) { return word.compare(0, 2, "--") == 0; }

// The long flag a word names: "--job-dir=/out" and "--job-dir" name
// "job-dir", "-n" and "-nml" name "namespace" where the command takes it
// (pflag's short forms); "" for anything else.
std::string FlagNamed(const std::string& word, const std::vector<std::string>& value_flags) {
  if (word.size() > 2 && StartsWithDashes(word)) return word.substr(2, word.find('=') - 2);
  if (word.size() < 2 || word[0] != '-') return "";
  for (const auto& [letter, name] : kShortFlags) {
    if (word[1] == letter && Listed(value_flags, name)) return name;
  }
  return "";
}

// The words CLI11 is to read, and what to report where they stop short.
struct Words {
  std::vector<std::string> words;
  std::vector<std::string> after_double_dash;
  // Said when CLI11 reads `words` without error, or reports the last word
  // (a value flag) as missing its value.
  std::string problem;
};

// A value flag and its value as one word CLI11 reads whatever the value
// starts with ("--job-dir=-x", "-n-x"), or as two where the value is empty
// (CLI11 reads "--job-dir=" as the flag alone).
void PushFlagWithValue(const std::string& flag, const std::string& value,
                       std::vector<std::string>& words) {
  if (value.empty()) {
    words.push_back(flag);
    words.push_back(value);
  } else {
    words.push_back(flag + (StartsWithDashes(flag) ? "=" : "") + value);
  }
}

// The command lines' own rules, which CLI11 does not know, applied before it
// reads the words: "--" ends the flags (the trainer's own follow); a value
// flag followed by a word starting with "--" is a forgotten value, not a
// folder named "--stream-logs", so a value starting with "--" is given as
// --name=value; a bool flag's value is true or false; "-n=NS" is pflag's
// spelling of "-nNS". The words stop at the first problem, so that CLI11
// still reports one found earlier on the line.
Words SplitWords(const std::vector<std::string>& args, const std::vector<std::string>& value_flags,
                 const std::vector<std::string>& bool_flags) {
  Words split;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") {
      split.after_double_dash.assign(args.begin() + i + 1, args.end());
      break;
    }
    if (word.compare(0, 3, "---") == 0) {  // CLI11 would take it for an argument
      split.problem = "unknown flag " + word.substr(0, word.find('='));
      break;
    }
    const std::string name = FlagNamed(word, value_flags);
    const bool long_form = StartsWithDashes(word);
    const size_t eq = word.find('=');
    if (Listed(bool_flags, name) && long_form && eq != std::string::npos) {
      const std::string value = word.substr(eq + 1);
      if (value != "true" && value != "false") {
        split.problem = "flag --" + name + " takes true or false, got \"" + value + "\"";
        break;
      }
      split.words.push_back(word);
    } else if (!Listed(value_flags, name)) {
      split.words.push_back(word);  // a positional argument, a bool flag, an unknown flag
    } else if (long_form ? eq != std::string::npos : word.size() > 2) {
      // --name=VALUE, -nVALUE, -n=VALUE
      const size_t value_at = long_form ? eq + 1 : word[2] == '=' ? 3 : 2;
      PushFlagWithValue(word.substr(0, long_form ? eq : 2), word.substr(value_at), split.words);
    } else if (i + 1 == args.size()) {
      split.words.push_back(word);  // CLI11 reports the missing value
    } else if (StartsWithDashes(args[i + 1])) {
      const std::string& next = args[i + 1];
      split.words.push_back(word);
      split.problem = "flag --" + name + " needs a value, got " +
                      (next == "--" ? std::string("\"--\"") : "flag " + next) + " (write --" +
                      name + "=VALUE for a value that starts with --)";
      break;
    } else {
      PushFlagWithValue(word, args[++i], split.words);
    }
  }
  return split;
}

}  // namespace

ParsedArgs ParseArgs(const std::vector<std::string>& args,
                     const std::vector<std::string>& value_flags,
                     const std::vector<std::string>& bool_flags) {
  ParsedArgs parsed;
  Words split = SplitWords(args, value_flags, bool_flags);
  parsed.after_double_dash = std::move(split.after_double_dash);

  CLI::App app;
  flags::Configure(app);
  app.set_help_flag();  // RunCli answers --help before a command runs
  // Every occurrence is kept: commands read the last (Flag) or all (--labels).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  for (const std::string& name : value_flags) {
    std::string names = "--" + name;
    for (const auto& [letter, long_name] : kShortFlags) {
      if (name == long_name) names = std::string{'-', letter} + "," + names;
    }
    app.add_option(names)->type_size(1);
  }
  for (const std::string& name : bool_flags) app.add_flag("--" + name);
  app.add_option("ARGS", parsed.positional);

  std::vector<std::string> reversed(split.words.rbegin(), split.words.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    parsed.positional.clear();
    // The line's first problem: an unknown flag before the one CLI11 stopped at.
    const std::vector<std::string> unknown = app.remaining(true);
    const flags::ParseProblem problem = flags::Classify(app, error);
    if (!unknown.empty() && unknown.front().size() > 1 && unknown.front()[0] == '-') {
      const std::string& flag = unknown.front();
      parsed.error = "unknown flag " +
                     (StartsWithDashes(flag) ? flag.substr(0, flag.find('=')) : flag.substr(0, 2));
    } else if (problem.kind == flags::ParseProblem::Kind::kMissingValue) {
      parsed.error =
          split.problem.empty() ? "flag " + problem.subject + " needs a value" : split.problem;
    } else {
      parsed.error = problem.subject;
    }
    return parsed;
  }
  if (!split.problem.empty()) {
    parsed.positional.clear();
    parsed.error = split.problem;
    return parsed;
  }
  // The flags in the order given: each occurrence takes its option's next value.
  std::map<const CLI::Option*, size_t> taken;
  for (const CLI::Option* option : app.parse_order()) {
    if (option->get_lnames().empty()) continue;  // ARGS
    parsed.flags.emplace_back(option->get_lnames().front(), option->results()[taken[option]++]);
  }
  return parsed;
}

ParsedArgs ParseArgs(const std::vector<std::string>& args, const std::vector<FlagSpec>& flags) {
  std::vector<std::string> value_flags, bool_flags;
  for (const FlagSpec& flag : flags)
    (flag.value.empty() ? bool_flags : value_flags).push_back(flag.name);
  return ParseArgs(args, value_flags, bool_flags);
}

std::vector<FlagSpec> BackendFlags() {
  return {
      {"local", "",
       "the jobs of this machine ($KUBETRAIN_HOME), not a cluster's (default: true when "
       "KUBETRAIN_BACKEND=local)"},
      {"namespace", "NS",
       "the cluster namespace (default: the kubeconfig context's, else default)"},
      {"context", "CONTEXT", "the kubeconfig context (default: its current-context)"},
      {"kubeconfig", "FILE",
       "the kubeconfig (default: $KUBECONFIG, else ~/.kube/config, else the pod's service "
       "account)"},
  };
}

std::string FlagsHelp(const std::vector<FlagSpec>& flags) {
  if (flags.empty()) return "";
  std::vector<std::pair<std::string, const std::string*>> lines;
  size_t width = 0;
  for (const FlagSpec& flag : flags) {
    std::string names = "    --" + flag.name;
    for (const auto& [letter, long_name] : kShortFlags) {
      if (flag.name == long_name && !flag.value.empty())
        names = std::string{'-', letter} + ", --" + flag.name;
    }
    if (!flag.value.empty()) names += " " + flag.value;
    width = std::max(width, names.size());
    lines.emplace_back(std::move(names), &flag.help);
  }
  std::string text = "Flags:\n";
  for (auto& [names, help] : lines) {
    names.resize(width + 2, ' ');
    text += "  " + names + *help + "\n";
  }
  return text;
}

std::vector<Command> AllCommands() {
  std::vector<Command> commands;
  for (auto list : {ValidateCommands, JobsCommands, LocalCommands, RenderCommands, UiCommands}) {
    for (Command& command : list()) commands.push_back(std::move(command));
  }
  return commands;
}

namespace {

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
      if (!best->flags.empty()) out << "\n" << FlagsHelp(best->flags);
      return kExitOk;
    }
  }
  return best->run(rest, out, err);
}

}  // namespace kubetrain::cli
