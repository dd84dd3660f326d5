#include "trainer-runtime/engine/trainer_flags.h"

#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "api/storage_uri.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::engine {

namespace {

using Setter = std::function<bool(TrainerOptions&, const std::string&)>;

struct FlagDef {
  Setter set;
  std::string help;
};

Setter String(std::string TrainerOptions::*field) {
  return [field](TrainerOptions& o, const std::string& v) {
    o.*field = v;
    return true;
  };
}
Setter Int(int64_t TrainerOptions::*field) {
  return
      [field](TrainerOptions& o, const std::string& v) { return absl::SimpleAtoi(v, &(o.*field)); };
}
Setter Int32(int TrainerOptions::*field) {
  return
      [field](TrainerOptions& o, const std::string& v) { return absl::SimpleAtoi(v, &(o.*field)); };
}
Setter Double(double TrainerOptions::*field) {
  return
      [field](TrainerOptions& o, const std::string& v) { return absl::SimpleAtod(v, &(o.*field)); };
}

const std::map<std::string, FlagDef>& Flags() {
  static const auto* flags = new std::map<std::string, FlagDef>{
      {"train_data_paths",
       {String(&TrainerOptions::train_data_paths),
        "training data (IDX images file, folder, .csv)"}},
      {"eval_data_paths",
       {String(&TrainerOptions::eval_data_paths), "evaluation data, same forms"}},
      {"output_path", {String(&TrainerOptions::output_path), "checkpoints, summaries, export"}},
      {"job_dir", {String(&TrainerOptions::output_path), "alias of --output_path"}},
      {"batch_size", {Int(&TrainerOptions::batch_size), "examples per step (128)"}},
      {"learning_rate", {Double(&TrainerOptions::learning_rate), "(0.001)"}},
      {"optimizer", {String(&TrainerOptions::optimizer), "sgd, momentum, adagrad, adam (adam)"}},
      {"max_steps", {Int(&TrainerOptions::max_steps), "stop after this global step"}},
      {"num_epochs", {Double(&TrainerOptions::num_epochs), "or after this many epochs (1)"}},
      {"eval_every_secs",
       {Double(&TrainerOptions::eval_every_secs),
        "evaluate this often (60; 0: at the end only); the chief evaluates, after the last "
        "step too"}},
      {"eval_every_steps",
       {Int(&TrainerOptions::eval_every_steps),
        "evaluate every N global steps instead of by time (a learning curve for early "
        "stopping)"}},
      {"eval_every_epochs",
       {Double(&TrainerOptions::eval_every_epochs),
        "evaluate every N epochs (of this task's shard; 0.5 is twice an epoch) instead of by "
        "time"}},
      {"log_every_steps", {Int(&TrainerOptions::log_every_steps), "(100)"}},
      {"save_checkpoints_secs", {Double(&TrainerOptions::save_checkpoints_secs), "(60)"}},
      {"save_checkpoints_steps",
       {Int(&TrainerOptions::save_checkpoints_steps), "by steps instead of seconds"}},
      {"keep_checkpoints", {Int32(&TrainerOptions::keep_checkpoints), "(5)"}},
      {"seed",
       {[](TrainerOptions& o, const std::string& v) { return absl::SimpleAtoi(v, &o.seed); },
        "(0)"}},
      {"threads", {Int32(&TrainerOptions::threads), "compute threads (all cores)"}},
      {"device",
       {[](TrainerOptions& o, const std::string& v) {
          o.device = v;
          return CheckDevicePlacement(v).ok();
        },
        "cpu, gpu or auto: the GPU when the build has CUDA and one is visible (auto)"}},
      {"cpu_kernels",
       {[](TrainerOptions& o, const std::string& v) {
          absl::StatusOr<CpuKernels> kernels = ParseCpuKernels(v);
          if (kernels.ok()) o.cpu_kernels = *kernels;
          return kernels.ok();
        },
        absl::StrCat("onednn or blas: the CPU device's kernels (",
                     CpuKernelsName(DefaultCpuKernels()), ")")}},
      {"model", {String(&TrainerOptions::model), "mlp, cnn or a model YAML file (mlp)"}},
      {"hidden1", {Int(&TrainerOptions::hidden1), "mlp: first hidden layer (256)"}},
      {"hidden2", {Int(&TrainerOptions::hidden2), "mlp: second hidden layer (128)"}},
      {"eval_batch_size", {Int(&TrainerOptions::eval_batch_size), "(1000)"}},
  };
  return *flags;
}

bool IsPathFlag(absl::string_view name) {
  for (absl::string_view flag : api::kPathFlags) {
    if (flag == name) return true;
  }
  return false;
}

absl::Status Usage(const std::string& message) {
  return WithExitCode(absl::InvalidArgumentError(message), kExitUsage);
}

}  // namespace

absl::StatusOr<TrainerOptions> ParseTrainerFlags(const std::vector<std::string>& args) {
  TrainerOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) return Usage(absl::StrCat("unexpected argument '", arg, "'"));
    std::string body = arg.substr(2);
    std::string name, value;
    bool has_value = false;
    size_t eq = body.find('=');
    if (eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    } else {
      name = body;
    }
    const std::string spelled = name;  // as typed, for messages: --job-dir
    name = absl::StrReplaceAll(name, {{"-", "_"}});
    auto it = Flags().find(name);
    if (it == Flags().end()) return Usage(absl::StrCat("unknown flag '--", name, "'"));
    if (!has_value) {
      if (i + 1 >= args.size()) return Usage(absl::StrCat("flag '--", name, "' needs a value"));
      value = args[++i];
    }
    // A URI given as a path would become a local folder named "gs:".
    if (IsPathFlag(name)) {
      if (absl::string_view uri = api::FirstUri(value); !uri.empty()) {
        return Usage(absl::StrCat("flag '--", spelled, "': ", api::UriNotSupported(uri)));
      }
    }
    if (!it->second.set(options, value)) {
      if (name == "device") return CheckDevicePlacement(value);
      if (name == "cpu_kernels") {
        return Usage(
            absl::StrCat("flag '--cpu_kernels': ", ParseCpuKernels(value).status().message()));
      }
      return Usage(absl::StrCat("flag '--", name, "': cannot parse '", value, "'"));
    }
  }
  return options;
}

std::string TrainerFlagsHelp() {
  std::string out;
  for (const auto& [name, def] : Flags()) absl::StrAppend(&out, "  --", name, "  ", def.help, "\n");
  return out;
}

}  // namespace kubetrain::runtime::engine
