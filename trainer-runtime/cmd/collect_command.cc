// `kubetrain-runtime collect --file PATH [--poll-interval DURATION]
// [--grace DURATION]`: forwards the reports a trainer writes with
// cloudml-hypertune to the operator's Metrics service, from beside it.
//
// The operator runs it as a sidecar of a tuning trial's chief when that
// replica runs its own image's entrypoint (docs/bring-your-code.md): the
// trainer's CLOUD_ML_HP_METRIC_FILE is PATH, on a volume both containers
// mount, and collect has the trial's KUBETRAIN_METRICS_* variables, which
// the trainer's container does not. It reads PATH every poll interval and
// queues each new report, as exec does for its child. Once SIGTERM or SIGINT
// comes (the trainer has ended and the kubelet stops its sidecars, or the pod
// is being deleted) it reads PATH a last time, waits for the last report at
// most --grace, and exits: 0 when every report was delivered, else the
// reporter's exit code with the address and the error on stderr. Without
// KUBETRAIN_METRICS_ADDR (or KUBETRAIN_TRIAL_ID) there is nothing to report
// to: it only waits for the signal, as a sidecar must not end by itself.
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/flags/flags.h"
#include "common/hypertune/hypertune.h"
#include "trainer-runtime/cmd/command_error.h"
#include "trainer-runtime/cmd/report_forwarding.h"
#include "trainer-runtime/cmd/subcommand.h"
#include "trainer-runtime/cmd/trial_reporter.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::cmd {
namespace {

constexpr char kWho[] = "kubetrain-runtime collect";

constexpr char kCollectDescription[] =
    "usage: kubetrain-runtime collect --file PATH [--poll-interval DURATION] [--grace DURATION]\n"
    "\n"
    "Forwards the reports a trainer writes to the cloudml-hypertune metric file PATH\n"
    "to the operator's Metrics service (KUBETRAIN_METRICS_ADDR and the trial's\n"
    "variables), from a container beside the trainer's. Runs until SIGTERM or\n"
    "SIGINT, then reads PATH a last time and waits at most --grace for the last\n"
    "report: exits 0 when it was delivered, else with the reporter's exit code.\n"
    "\n"
    "flags:";

struct CollectArgs {
  std::string file;
  absl::Duration poll_interval = absl::Seconds(1);
  // Inside Kubernetes' default 30 s grace period, with room to spare.
  absl::Duration grace = absl::Seconds(20);
};

int CollectFail(const absl::Status& status) {
  return FailWithExitCode(absl::StrCat(kWho, ": "), status);
}

void DefineCollectFlags(CLI::App& app, CollectArgs* parsed) {
  flags::Configure(app, 28);
  app.add_option("--file", parsed->file, "the trainer's CLOUD_ML_HP_METRIC_FILE")
      ->type_name("PATH")
      ->required();
  struct DurationFlag {
    const char* name;
    absl::Duration* target;
    const char* help;
  };
  for (const DurationFlag& duration :
       {DurationFlag{"--poll-interval", &parsed->poll_interval, "how often to read the file"},
        DurationFlag{"--grace", &parsed->grace,
                     "how long the last report may take once told to stop"}}) {
    const std::string flag = duration.name;
    absl::Duration* target = duration.target;
    app.add_option_function<std::string>(
           flag,
           [flag, target](const std::string& value) {
             if (!absl::ParseDuration(value, target) || *target <= absl::ZeroDuration()) {
               flags::Reject(absl::StrCat(flag, "=", value,
                                          ": must be a positive duration such as 500ms or 2s"));
             }
           },
           duration.help)
        ->type_name("DURATION")
        ->default_str(absl::FormatDuration(*target));
  }
}

std::string CollectHelp() {
  CollectArgs defaults;
  CLI::App app(kCollectDescription);
  DefineCollectFlags(app, &defaults);
  return app.help();
}

absl::StatusOr<CollectArgs> ParseCollectArgs(const std::vector<std::string>& args) {
  CollectArgs parsed;
  CLI::App app(kCollectDescription);
  DefineCollectFlags(app, &parsed);
  app.set_help_flag();
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    flags::ParseProblem problem = flags::Classify(app, error);
    return WithExitCode(absl::InvalidArgumentError(problem.subject), kExitUsage);
  }
  if (parsed.file.empty()) {
    return WithExitCode(absl::InvalidArgumentError("--file needs a path, the metric file"),
                        kExitUsage);
  }
  return parsed;
}

// The last report's outcome, waited for at most `grace` (the reporter's own
// deadline may be longer: the pod is being stopped); past it, the process
// exits with the retryable code.
absl::Status FinishWithin(TrialReporter& reporter, absl::Duration grace) {
  auto outcome = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> delivered = outcome->get_future();
  // Detached: when collect stops waiting it exits at once, finished or not.
  std::thread([&reporter, outcome] { outcome->set_value(reporter.Finish()); }).detach();
  if (delivered.wait_for(absl::ToChronoMilliseconds(grace)) != std::future_status::ready) {
    // Nothing else of this process needs an orderly end, and the reporter's
    // thread is still sending: exit at once.
    std::_Exit(CollectFail(
        WithExitCode(absl::DeadlineExceededError(absl::StrCat(
                         "the trial's last metrics report did not reach ", reporter.address(),
                         " within ", absl::FormatDuration(grace), " of the signal to stop")),
                     kExitRetryable)));
  }
  return delivered.get();
}

int RunCollect(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      std::cout << CollectHelp();
      return kExitOk;
    }
  }
  absl::StatusOr<CollectArgs> parsed = ParseCollectArgs(args);
  if (!parsed.ok()) {
    std::cerr << kWho << ": " << parsed.status().message() << "\n\n" << CollectHelp();
    return ExitCodeFor(parsed.status());
  }
  absl::StatusOr<std::unique_ptr<TrialReporter>> reporter =
      TrialReporter::FromEnvironment(std::cerr);
  if (!reporter.ok()) return CollectFail(reporter.status());
  absl::StatusOr<int> signals = CatchSignalsInAPipe();
  if (!signals.ok()) return CollectFail(signals.status());
  // (After the signals are caught: a signal from now on ends it in order.)
  if (*reporter == nullptr) {
    std::cout << kWho << ": no Metrics service to report to; waiting to be stopped" << std::endl;
  } else {
    std::cout << kWho << ": forwarding the reports in " << parsed->file << " to "
              << (*reporter)->address() << std::endl;
  }

  const int interval_ms =
      static_cast<int>(std::max<int64_t>(absl::ToInt64Milliseconds(parsed->poll_interval), 1));
  hypertune::HypertuneFileFollower follower;
  for (;;) {
    pollfd ready = {*signals, POLLIN, 0};
    const bool stop = poll(&ready, 1, interval_ms) > 0 && ReadTerminationSignal(*signals, 0) != 0;
    // Read once more after the signal: the trainer's last report is there.
    if (*reporter != nullptr) ForwardNewReports(follower, parsed->file, **reporter, kWho);
    if (stop) break;
  }
  if (*reporter == nullptr) return kExitOk;
  if (absl::Status status = FinishWithin(**reporter, parsed->grace); !status.ok()) {
    return CollectFail(status);
  }
  return kExitOk;
}

}  // namespace

KUBETRAIN_RUNTIME_SUBCOMMAND(collect,
                             "forward a trainer's cloudml-hypertune reports to the operator from "
                             "a sidecar",
                             RunCollect);

}  // namespace kubetrain::runtime::cmd
