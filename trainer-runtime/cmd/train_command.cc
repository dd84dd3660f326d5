// `kubetrain-runtime train`: training with Cloud ML trainer flags, on one
// process or as one task of the cluster TF_CONFIG describes (master, worker,
// ps or evaluator; see trainer-runtime/dist/strategy/task_runner.h).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/roles.h"
#include "common/flags/flags.h"
#include "common/hypertune/hypertune.h"
#include "common/observability/metrics_server.h"
#include "prometheus/registry.h"
#include "trainer-runtime/cmd/command_error.h"
#include "trainer-runtime/cmd/subcommand.h"
#include "trainer-runtime/cmd/trial_reporter.h"
#include "trainer-runtime/dist/strategy/task_runner.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/engine/trainer.h"
#include "trainer-runtime/engine/trainer_flags.h"
#include "trainer-runtime/exit_codes.h"
#include "trainer-runtime/observability/runtime_metrics.h"

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

  absl::Status Report(int64_t step, const std::map<std::string, double>& metrics,
                      bool final) override {
    const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
    for (const auto& [tag, value] : metrics) {
      absl::Status status = writer_->Report(tag, value, step, now, final);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<hypertune::HypertuneWriter> writer_;
};

// Sends each evaluation's metrics, all tags in one report, to the operator's
// Metrics service (the tuner's objective). Queues and returns at once: the
// operator may be slow or failing over.
class TrialReporterSink : public engine::MetricsSink {
 public:
  explicit TrialReporterSink(TrialReporter* reporter) : reporter_(reporter) {}

  absl::Status Report(int64_t step, const std::map<std::string, double>& metrics,
                      bool final) override {
    reporter_->Report(step, metrics, final);
    return absl::OkStatus();
  }

 private:
  TrialReporter* reporter_;
};

// Feeds evaluation results into the task's Prometheus metrics: "loss" (the
// last evaluation's loss) and the hyperparameter metric tag (the objective).
// Only the chief evaluates during training, so only its loss/objective move.
class PrometheusSink : public engine::MetricsSink {
 public:
  PrometheusSink(observability::RuntimeMetrics* metrics, std::string objective_tag)
      : metrics_(metrics), objective_tag_(std::move(objective_tag)) {}

  absl::Status Report(int64_t, const std::map<std::string, double>& metrics, bool) override {
    if (auto it = metrics.find("loss"); it != metrics.end()) metrics_->SetLoss(it->second);
    if (auto it = metrics.find(objective_tag_); it != metrics.end()) {
      metrics_->SetObjective(it->second);
    }
    return absl::OkStatus();
  }

 private:
  observability::RuntimeMetrics* metrics_;
  std::string objective_tag_;
};

int Fail(const absl::Status& status) { return FailWithExitCode("ERROR: ", status); }

// SIGTERM (the kubelet deleting the pod: SIGKILL follows after its grace
// period) and SIGINT (Ctrl-C) ask the training loop to stop after the step in
// progress and checkpoint it, so that the steps since the last periodic
// checkpoint are not trained again (a paused tuning trial resumes where it
// stopped). The handler only records the signal; the loop polls it through
// TrainerEnvironment::pending_stop. A second signal ends the process at
// once, as it would have without the handler (a second Ctrl-C when the
// checkpoint takes too long).
std::atomic<int> stop_signal{0};
// How long a stopped trainer waits for its queued metrics reports, as `exec`
// waits for the last one after a SIGTERM.
constexpr std::chrono::milliseconds kStopReportGrace{2000};
// Lock-free atomics are the only shared state a handler may touch.
static_assert(std::atomic<int>::is_always_lock_free);
static_assert(kExitStoppedBySigterm == 128 + SIGTERM && kExitStoppedBySigint == 128 + SIGINT);

void OnStopSignal(int signal_number) {
  int none = 0;
  if (stop_signal.compare_exchange_strong(none, signal_number)) return;
  // signal() and raise() are async-signal-safe. The signal stays blocked
  // until this handler returns; then its default action ends the process.
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

// Installs OnStopSignal for SIGTERM and SIGINT. Process-wide: it may run on
// any thread (those started before main, e.g. OpenBLAS's, included), which
// is why it only stores to an atomic.
void CatchStopSignals() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

// The stop the caught signal asks for, with its exit code (143 or 130); OK
// while none came.
absl::Status PendingStopSignal() {
  switch (stop_signal.load(std::memory_order_relaxed)) {
    case 0:
      return absl::OkStatus();
    case SIGINT:
      return WithExitCode(absl::CancelledError("SIGINT"), kExitStoppedBySigint);
    default:
      return WithExitCode(absl::CancelledError("SIGTERM"), kExitStoppedBySigterm);
  }
}

constexpr char kEnvironmentHelp[] =
    "\nenvironment:\n"
    "  CLOUD_ML_HP_METRIC_FILE     write each evaluation to this cloudml-hypertune file\n"
    "  KUBETRAIN_METRICS_ADDR      report each evaluation of a tuning trial to the\n"
    "                              operator's Metrics service (with KUBETRAIN_METRICS_TOKEN\n"
    "                              and the trial's identity, as the operator sets them);\n"
    "                              exit code 138 when the last report is not delivered\n"
    "                              within KUBETRAIN_METRICS_DEADLINE (default 60s)";

int RunTrain(const std::vector<std::string>& args) {
  // One parse of the arguments: the trainer's flags, the distributed ones
  // and --metrics_address.
  engine::TrainerOptions options;
  dist::DistributedFlags flags;
  std::string metrics_address;
  if (const char* env = std::getenv("KUBETRAIN_RUNTIME_METRICS_ADDR"); env != nullptr) {
    metrics_address = env;
  }
  CLI::App app(
      "usage: kubetrain-runtime train [flags]\n\nflags (each also spelled with - for _, as in "
      "--job-dir):");
  kubetrain::flags::Configure(app);
  app.footer(kEnvironmentHelp);
  engine::AddTrainerFlags(app, &options);
  dist::AddDistributedFlags(app, &flags);
  app.add_option("--metrics_address", metrics_address,
                 "serve Prometheus /metrics (step time, examples/s, loss,\n"
                 "objective; env KUBETRAIN_RUNTIME_METRICS_ADDR; the bound\n"
                 "address is printed as \"serving metrics on\")")
      ->type_name("HOST:PORT");
  app.add_option("--metrics-address", metrics_address)->group(kubetrain::flags::kUnlistedGroup);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& error) {
    absl::Status status = engine::TrainerFlagsError(app, error);
    std::cerr << "kubetrain-runtime train: " << status.message() << "\n";
    return ExitCodeFor(status);
  }
  options.owner = engine::CheckpointOwnerFromEnvironment();
  const char* tf_config = std::getenv("TF_CONFIG");
  absl::StatusOr<dist::ClusterSpec> cluster =
      dist::ClusterSpec::FromTfConfig(tf_config != nullptr ? tf_config : "");
  if (!cluster.ok()) return Fail(WithExitCode(cluster.status(), kExitUsage));

  engine::TrainerEnvironment env;
  // Only the chief evaluates during training, so only its metrics count.
  std::unique_ptr<TrialReporter> trial_reporter;
  std::unique_ptr<TrialReporterSink> trial_sink;
  if (cluster->IsChief()) {
    absl::StatusOr<std::unique_ptr<TrialReporter>> reporter =
        TrialReporter::FromEnvironment(std::cerr);
    if (!reporter.ok()) return Fail(reporter.status());
    trial_reporter = *std::move(reporter);
  }
  if (trial_reporter != nullptr) {
    trial_sink = std::make_unique<TrialReporterSink>(trial_reporter.get());
    env.metrics_sinks.push_back(trial_sink.get());
  }
  std::unique_ptr<HypertuneFileSink> hypertune_sink;
  if (std::getenv("CLOUD_ML_HP_METRIC_FILE") != nullptr) {
    absl::StatusOr<std::unique_ptr<hypertune::HypertuneWriter>> writer =
        hypertune::HypertuneWriter::Create(hypertune::HypertuneWriter::OptionsFromEnvironment());
    if (!writer.ok()) return Fail(WithExitCode(writer.status(), kExitBadInput));
    hypertune_sink = std::make_unique<HypertuneFileSink>(*std::move(writer));
    env.metrics_sinks.push_back(hypertune_sink.get());
  }
  // Declared before the server so that the server, which scrapes the
  // registry, stops first.
  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<observability::RuntimeMetrics> metrics;
  std::unique_ptr<observability::MetricsServer> metrics_server;
  std::unique_ptr<PrometheusSink> prometheus_sink;
  if (!metrics_address.empty()) {
    const dist::TaskId& task = cluster->task();
    const char* job = std::getenv("CLOUD_ML_JOB_ID");
    prometheus::Labels labels = {
        {"job_id", job != nullptr ? job : ""},
        {"task_type", task.role == api::Role::kMaster ? cluster->master_name()
                                                      : std::string(api::RoleName(task.role))},
        {"task_index", std::to_string(task.index)}};
    if (!cluster->trial().empty()) labels["trial"] = cluster->trial();
    metrics = std::make_unique<observability::RuntimeMetrics>(*registry, labels);
    auto server = observability::MetricsServer::Start({.address = metrics_address}, {registry});
    if (!server.ok()) {
      return Fail(
          WithExitCode(absl::Status(server.status().code(),
                                    absl::StrCat("--metrics_address: ", server.status().message())),
                       kExitUsage));
    }
    metrics_server = *std::move(server);
    metrics_server->SetReady(true);
    const std::string host = metrics_address.substr(0, metrics_address.rfind(':'));
    std::cerr << "kubetrain-runtime: serving metrics on " << (host.empty() ? "0.0.0.0" : host)
              << ":" << metrics_server->port() << std::endl;
    const char* tag = std::getenv("KUBETRAIN_METRIC_TAG");
    prometheus_sink = std::make_unique<PrometheusSink>(
        metrics.get(), tag != nullptr && *tag != '\0' ? tag : "training/hptuning/metric");
    env.metrics_sinks.push_back(prometheus_sink.get());
    // Step time: between consecutive steps of this task (the first step,
    // which includes start-up, is not timed).
    const int64_t examples_per_step = options.batch_size;
    env.after_step = [m = metrics.get(), examples_per_step,
                      last = std::optional<absl::Time>()](int64_t) mutable {
      absl::Time now = absl::Now();
      if (last) m->ObserveStep(absl::ToDoubleSeconds(now - *last), examples_per_step);
      last = now;
      return absl::OkStatus();
    };
  }
  if (trial_reporter != nullptr) {
    // A refused token will not be accepted later: stop instead of training
    // for nothing.
    env.after_step = [next = std::move(env.after_step),
                      reporter = trial_reporter.get()](int64_t step) {
      if (absl::Status denied = reporter->permanent_error(); !denied.ok()) return denied;
      return next ? next(step) : absl::OkStatus();
    };
  }
  // Only the chief writes checkpoints, so only it has something to do before
  // it stops; the other tasks keep the default action and end at once (a
  // worker waiting in a synchronous step would otherwise wait for SIGKILL).
  if (cluster->IsChief()) {
    CatchStopSignals();
    env.pending_stop = PendingStopSignal;
  }
  absl::StatusOr<engine::TrainResult> result =
      dist::RunTask(*cluster, flags, std::move(options), std::move(env));
  if (!result.ok()) {
    // A stop is orderly (the loop logged its checkpoint), not an error.
    const int code = ExitCodeFor(result.status());
    if (code == kExitStoppedBySigterm || code == kExitStoppedBySigint) {
      // The evaluations made before the stop belong to the trial's curve (a
      // paused trial is judged on them): they still go out, for a moment
      // well inside the pod's grace period.
      if (trial_reporter != nullptr) {
        if (absl::Status s = trial_reporter->Drain(kStopReportGrace); !s.ok()) {
          std::cerr << "kubetrain-runtime train: warning: evaluations reported before the stop "
                       "may not have reached the operator: "
                    << s.message() << std::endl;
        }
      }
      return FailWithExitCode("kubetrain-runtime train: ", result.status());
    }
    return Fail(result.status());
  }
  if (trial_reporter != nullptr) {
    if (absl::Status delivered = trial_reporter->Finish(); !delivered.ok()) return Fail(delivered);
  }
  return kExitOk;
}

}  // namespace

KUBETRAIN_RUNTIME_SUBCOMMAND(train, "train a model (Cloud ML trainer flags, TF_CONFIG clusters)",
                             RunTrain);

}  // namespace kubetrain::runtime::cmd
