#include "trainer-runtime/engine/trainer_flags.h"

#include <functional>
#include <sstream>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "api/storage_uri.h"
#include "common/flags/flags.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::engine {

namespace {

// Sets a field from the flag's text; false when the text does not parse.
using Setter = std::function<bool(TrainerOptions&, const std::string&)>;

struct FlagDef {
  const char* name;  // with '_'; '-' is accepted for each '_'
  const char* type;  // the value's name in help
  Setter set;
  std::string help;
  // The default shown in help, from a default TrainerOptions; "" for none.
  std::function<std::string(const TrainerOptions&)> shown_default;
};

template <typename T>
std::string Shown(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

template <typename T>
FlagDef Field(const char* name, const char* type, T TrainerOptions::*field, std::string help,
              bool show_default = true) {
  Setter set = [field](TrainerOptions& o, const std::string& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      o.*field = v;
      return true;
    } else if constexpr (std::is_floating_point_v<T>) {
      return absl::SimpleAtod(v, &(o.*field));
    } else {
      return absl::SimpleAtoi(v, &(o.*field));
    }
  };
  std::function<std::string(const TrainerOptions&)> shown;
  if (show_default) shown = [field](const TrainerOptions& o) { return Shown(o.*field); };
  return FlagDef{name, type, std::move(set), std::move(help), std::move(shown)};
}

const std::vector<FlagDef>& Flags() {
  static const auto* flags = new std::vector<FlagDef>{
      Field("train_data_paths", "PATHS", &TrainerOptions::train_data_paths,
            "training data (IDX images file, folder, .csv)"),
      Field("eval_data_paths", "PATHS", &TrainerOptions::eval_data_paths,
            "evaluation data, same forms"),
      Field("output_path", "DIR", &TrainerOptions::output_path, "checkpoints, summaries, export"),
      Field("job_dir", "DIR", &TrainerOptions::output_path, "alias of --output_path",
            /*show_default=*/false),
      Field("batch_size", "N", &TrainerOptions::batch_size, "examples per step"),
      Field("learning_rate", "RATE", &TrainerOptions::learning_rate, ""),
      Field("optimizer", "NAME", &TrainerOptions::optimizer, "sgd, momentum, adagrad, adam"),
      Field("max_steps", "N", &TrainerOptions::max_steps, "stop after this global step",
            /*show_default=*/false),
      Field("num_epochs", "N", &TrainerOptions::num_epochs, "or after this many epochs (1)",
            /*show_default=*/false),
      Field("eval_every_secs", "SECS", &TrainerOptions::eval_every_secs,
            "evaluate this often (0: at the end only); the chief evaluates,\n"
            "after the last step too"),
      Field("eval_every_steps", "N", &TrainerOptions::eval_every_steps,
            "evaluate every N global steps instead of by time (a learning\n"
            "curve for early stopping)",
            /*show_default=*/false),
      Field("eval_every_epochs", "N", &TrainerOptions::eval_every_epochs,
            "evaluate every N epochs (of this task's shard; 0.5 is twice an\n"
            "epoch) instead of by time",
            /*show_default=*/false),
      Field("log_every_steps", "N", &TrainerOptions::log_every_steps, ""),
      Field("save_checkpoints_secs", "SECS", &TrainerOptions::save_checkpoints_secs, ""),
      Field("save_checkpoints_steps", "N", &TrainerOptions::save_checkpoints_steps,
            "by steps instead of seconds", /*show_default=*/false),
      Field("keep_checkpoints", "N", &TrainerOptions::keep_checkpoints, ""),
      Field("seed", "N", &TrainerOptions::seed, ""),
      Field("threads", "N", &TrainerOptions::threads,
            "compute threads (the container's CPUs: its cgroup limit, else its request, else its "
            "CPU affinity)",
            /*show_default=*/false),
      FlagDef{"device", "PLACEMENT",
              [](TrainerOptions& o, const std::string& v) {
                o.device = v;
                return CheckDevicePlacement(v).ok();
              },
              "cpu, gpu or auto: the GPU when the build has CUDA and one is\nvisible",
              [](const TrainerOptions& o) { return o.device; }},
      FlagDef{"cpu_kernels", "KERNELS",
              [](TrainerOptions& o, const std::string& v) {
                absl::StatusOr<CpuKernels> kernels = ParseCpuKernels(v);
                if (kernels.ok()) o.cpu_kernels = *kernels;
                return kernels.ok();
              },
              "onednn or blas: the CPU device's kernels",
              [](const TrainerOptions& o) { return std::string(CpuKernelsName(o.cpu_kernels)); }},
      Field("model", "MODEL", &TrainerOptions::model, "mlp, cnn or a model YAML file"),
      Field("hidden1", "N", &TrainerOptions::hidden1, "mlp: first hidden layer"),
      Field("hidden2", "N", &TrainerOptions::hidden2, "mlp: second hidden layer"),
      Field("eval_batch_size", "N", &TrainerOptions::eval_batch_size, ""),
  };
  return *flags;
}

bool IsPathFlag(absl::string_view name) {
  for (absl::string_view flag : api::kPathFlags) {
    if (flag == name) return true;
  }
  return false;
}

// Checks and sets one flag's value, `spelled` as typed (--job-dir): a
// refused value throws Reject's error with the message users know.
void Set(const FlagDef& def, const std::string& spelled, const std::string& value,
         TrainerOptions* options) {
  const std::string name = def.name;
  // A URI given as a path would become a local folder named "gs:".
  if (IsPathFlag(name)) {
    if (absl::string_view uri = api::FirstUri(value); !uri.empty()) {
      flags::Reject(absl::StrCat("flag '", spelled, "': ", api::UriNotSupported(uri)));
    }
  }
  if (!def.set(*options, value)) {
    if (name == "device") flags::Reject(std::string(CheckDevicePlacement(value).message()));
    if (name == "cpu_kernels") {
      flags::Reject(
          absl::StrCat("flag '--cpu_kernels': ", ParseCpuKernels(value).status().message()));
    }
    flags::Reject(absl::StrCat("flag '--", name, "': cannot parse '", value, "'"));
  }
}

absl::Status Usage(const std::string& message) {
  return WithExitCode(absl::InvalidArgumentError(message), kExitUsage);
}

}  // namespace

void AddTrainerFlags(CLI::App& app, TrainerOptions* options) {
  const TrainerOptions defaults;
  for (const FlagDef& def : Flags()) {
    const std::string underscored = absl::StrCat("--", def.name);
    const std::string dashed = absl::StrReplaceAll(underscored, {{"_", "-"}});
    // One option per spelling, so a message names the flag as typed; run as
    // parsed, so the last of --job-dir and --output_path wins as typed.
    std::vector<std::string> spellings = {underscored};
    if (dashed != underscored) spellings.push_back(dashed);
    for (const std::string& spelled : spellings) {
      CLI::Option* option = app.add_option_function<std::string>(
          spelled,
          [&def, spelled, options](const std::string& value) { Set(def, spelled, value, options); },
          def.help);
      option->type_name(def.type)->trigger_on_parse();
      if (def.shown_default) option->default_str(def.shown_default(defaults));
      // Help lists each flag once, as Cloud ML spells it; the dashed
      // spelling is said there once for all.
      if (spelled != underscored) option->group(flags::kUnlistedGroup);
    }
  }
}

absl::Status TrainerFlagsError(const CLI::App& app, const CLI::ParseError& error) {
  flags::ParseProblem problem = flags::Classify(app, error);
  auto canonical = [](const std::string& flag) {
    return absl::StrReplaceAll(flag.substr(2), {{"-", "_"}});
  };
  switch (problem.kind) {
    case flags::ParseProblem::Kind::kUnknownFlag:
      return Usage(absl::StrCat("unknown flag '--", canonical(problem.subject), "'"));
    case flags::ParseProblem::Kind::kUnexpectedArgument:
      return Usage(absl::StrCat("unexpected argument '", problem.subject, "'"));
    case flags::ParseProblem::Kind::kMissingValue:
      return Usage(absl::StrCat("flag '--", canonical(problem.subject), "' needs a value"));
    case flags::ParseProblem::Kind::kOther:
      break;
  }
  return Usage(problem.subject);
}

absl::StatusOr<TrainerOptions> ParseTrainerFlags(const std::vector<std::string>& args) {
  TrainerOptions options;
  CLI::App app("usage: kubetrain-runtime train [flags]");
  flags::Configure(app);
  app.set_help_flag();  // --help is the subcommand's, not a trainer flag
  AddTrainerFlags(app, &options);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    return TrainerFlagsError(app, error);
  }
  return options;
}

}  // namespace kubetrain::runtime::engine
