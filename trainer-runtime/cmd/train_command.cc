// `kubetrain-runtime train`: single-process training with Cloud ML flags.
#include <cstdlib>
#include <iostream>

#include "nlohmann/json.hpp"
#include "trainer-runtime/cmd/subcommand.h"
#include "trainer-runtime/engine/trainer.h"
#include "trainer-runtime/engine/trainer_flags.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::cmd {
namespace {

// The task's role and index from TF_CONFIG, for log lines ("master/0" when
// unset or unreadable: a single-process run).
void ApplyTfConfig(engine::TrainerOptions& options) {
  const char* tf_config = std::getenv("TF_CONFIG");
  if (tf_config == nullptr) return;
  nlohmann::json j = nlohmann::json::parse(tf_config, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("task") || !j["task"].is_object()) return;
  const auto& task = j["task"];
  if (task.contains("type") && task["type"].is_string())
    options.task_type = task["type"].get<std::string>();
  if (task.contains("index") && task["index"].is_number_integer())
    options.task_index = task["index"].get<int>();
}

int RunTrain(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << "usage: kubetrain-runtime train [flags]\n\nflags:\n"
                << engine::TrainerFlagsHelp();
      return kExitOk;
    }
  }
  absl::StatusOr<engine::TrainerOptions> options = engine::ParseTrainerFlags(args);
  if (!options.ok()) {
    std::cerr << "kubetrain-runtime train: " << options.status().message() << "\n"
              << "flags:\n"
              << engine::TrainerFlagsHelp();
    return ExitCodeFor(options.status());
  }
  ApplyTfConfig(*options);
  absl::StatusOr<engine::TrainResult> result = engine::Train(*options, {});
  if (!result.ok()) {
    int code = ExitCodeFor(result.status());
    std::cerr << "ERROR: " << result.status().message() << " (exit code " << code
              << (IsRetryableExitCode(code) ? ", retryable" : "") << ")\n";
    return code;
  }
  return kExitOk;
}

}  // namespace

KUBETRAIN_RUNTIME_SUBCOMMAND(train, "train a model (Cloud ML trainer flags)", RunTrain);

}  // namespace kubetrain::runtime::cmd
