// `kubetrain-runtime train`: training with Cloud ML trainer flags, on one
// process or as one task of the cluster TF_CONFIG describes (master, worker,
// ps or evaluator; see trainer-runtime/dist/strategy/task_runner.h).
#include <cstdlib>
#include <iostream>
#include <memory>

#include "trainer-runtime/cmd/subcommand.h"
#include "trainer-runtime/dist/strategy/task_runner.h"
#include "trainer-runtime/engine/trainer.h"
#include "trainer-runtime/engine/trainer_flags.h"
#include "trainer-runtime/exit_codes.h"
#include "trainer-runtime/hypertune/hypertune.h"

namespace kubetrain::runtime::cmd {
namespace {

// Writes each evaluation's metrics to $CLOUD_ML_HP_METRIC_FILE the way the
// cloudml-hypertune library does, so the tuner reads the built-in runtime and
// existing Python trainers the same way. One report per metric: the tuner
// picks the one named by hyperparameterMetricTag.
class HypertuneFileSink : public engine::MetricsSink {
 public:
  explicit HypertuneFileSink(std::unique_ptr<hypertune::HypertuneWriter> writer)
      : writer_(std::move(writer)) {}

  absl::Status Report(int64_t step, const std::map<std::string, double>& metrics) override {
    for (const auto& [tag, value] : metrics) {
      absl::Status status = writer_->Report(tag, value, step);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<hypertune::HypertuneWriter> writer_;
};

int Fail(const absl::Status& status) {
  const int code = ExitCodeFor(status);
  std::cerr << "ERROR: " << status.message() << " (exit code " << code
            << (IsRetryableExitCode(code) ? ", retryable" : "") << ")" << std::endl;
  return code;
}

int RunTrain(const std::vector<std::string>& args_in) {
  std::vector<std::string> args = args_in;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << "usage: kubetrain-runtime train [flags]\n\nflags:\n"
                << engine::TrainerFlagsHelp()
                << "  --strategy auto|local|allreduce|ps\n"
                   "  --sync_replicas\n"
                   "  --transport auto|grpc|shm\n"
                   "  --connect_timeout_secs N\n";
      return kExitOk;
    }
  }
  absl::StatusOr<dist::DistributedFlags> flags = dist::ExtractDistributedFlags(args);
  if (!flags.ok()) return Fail(WithExitCode(flags.status(), kExitUsage));
  absl::StatusOr<engine::TrainerOptions> options = engine::ParseTrainerFlags(args);
  if (!options.ok()) {
    std::cerr << "kubetrain-runtime train: " << options.status().message() << "\n";
    return ExitCodeFor(options.status());
  }
  const char* tf_config = std::getenv("TF_CONFIG");
  absl::StatusOr<dist::ClusterSpec> cluster =
      dist::ClusterSpec::FromTfConfig(tf_config != nullptr ? tf_config : "");
  if (!cluster.ok()) return Fail(WithExitCode(cluster.status(), kExitUsage));

  engine::TrainerEnvironment env;
  std::unique_ptr<HypertuneFileSink> hypertune_sink;
  if (std::getenv("CLOUD_ML_HP_METRIC_FILE") != nullptr) {
    absl::StatusOr<std::unique_ptr<hypertune::HypertuneWriter>> writer =
        hypertune::HypertuneWriter::Create(hypertune::HypertuneWriter::OptionsFromEnvironment());
    if (!writer.ok()) return Fail(WithExitCode(writer.status(), kExitBadInput));
    hypertune_sink = std::make_unique<HypertuneFileSink>(*std::move(writer));
    env.metrics_sinks.push_back(hypertune_sink.get());
  }
  absl::StatusOr<engine::TrainResult> result =
      dist::RunTask(*cluster, *flags, *std::move(options), std::move(env));
  if (!result.ok()) return Fail(result.status());
  return kExitOk;
}

}  // namespace

KUBETRAIN_RUNTIME_SUBCOMMAND(train, "train a model (Cloud ML trainer flags, TF_CONFIG clusters)",
                             RunTrain);

}  // namespace kubetrain::runtime::cmd
