// `kubetrain-runtime exec [--poll-interval DURATION] [--package P]...
// [--python PYTHON] -- CMD ARGS...`: runs a trainer that reports through
// cloudml-hypertune, and forwards its reports to the operator's Metrics
// service. No command rewriting, no sidecar: the replica's command is this
// one. With --package, the trainer's packages are made importable first
// (packages.h): folders on PYTHONPATH, files and URLs installed with pip into
// a virtual environment made with PYTHON (default python3) in exec's private
// directory, whose bin/ leads the command's PATH.
//
// With KUBETRAIN_METRICS_ADDR set (a tuning trial on the operator):
//   1. make a private directory (mode 0700) and point the child's
//      CLOUD_ML_HP_METRIC_FILE at a file in it; the child does not see
//      KUBETRAIN_METRICS_ADDR/TOKEN (exec reports for it, so a child that
//      is itself `kubetrain-runtime train` does not report twice);
//   2. start the child, forwarding SIGTERM and SIGINT to it (signal
//      handlers write to a pipe the main loop waits on: threads started
//      before main, e.g. OpenBLAS's, would take signals that are only
//      blocked in ours);
//   3. every poll interval, and when the child exits, read the file with
//      HypertuneFileFollower (it is rewritten whole on each report) and
//      queue each new report (step = its global_step);
//   4. after the child has exited: wait for the last report (at most
//      KUBETRAIN_METRICS_DEADLINE), remove the directory, and exit with the
//      child's code (128+N when signal N killed it). If the child succeeded
//      but its last report was not delivered, exit 138 (retryable) instead,
//      or 1 when the operator refused the trial's token: a trial must not end
//      silently without its objective.
//   5. once SIGTERM or SIGINT has arrived (the pod is being deleted: an early
//      stop, a cancelled job, a drained node), the wait for the last report
//      lasts at most kTerminationGrace more, well inside Kubernetes' default
//      30 s grace period; then exec exits with the child's code, or 128+N
//      if the child succeeded but its last report is still on the way (so a
//      restarted replica reports it again), rather than block until SIGKILL.
// Without it (the local backend follows the file it set itself; a job that
// is not a tuning study), and on a task other than the chief (the master, or
// worker 0 without one: as with `train`, only the chief's metrics count):
// exec the command in place, environment unchanged (but for PYTHONPATH when
// a --package is a folder). When packages were installed, exec stays the
// command's parent instead (steps 2 and 4 without the reports), so that it
// removes the environment at the end.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/flags/flags.h"
#include "common/hypertune/hypertune.h"
#include "common/process/process.h"
#include "trainer-runtime/cmd/command_error.h"
#include "trainer-runtime/cmd/packages.h"
#include "trainer-runtime/cmd/report_forwarding.h"
#include "trainer-runtime/cmd/subcommand.h"
#include "trainer-runtime/cmd/trial_reporter.h"
#include "trainer-runtime/dist/cluster_spec.h"
#include "trainer-runtime/exit_codes.h"

extern char** environ;

namespace kubetrain::runtime::cmd {
namespace {

// How long a report may still take once the pod is being stopped.
constexpr absl::Duration kTerminationGrace = absl::Seconds(2);

// A shell's exit codes for a command that cannot be run.
constexpr int kExitCommandNotFound = 127;
constexpr int kExitCannotExecute = 126;

// The usage line and what exec does: the help's head, before the flags.
constexpr char kDescription[] =
    "usage: kubetrain-runtime exec [--poll-interval DURATION] [--package P]... [--python PYTHON]\n"
    "                              -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD, a trainer that reports metrics with cloudml-hypertune. On a tuning\n"
    "trial (KUBETRAIN_METRICS_ADDR set by the operator) CMD gets a private\n"
    "CLOUD_ML_HP_METRIC_FILE, whose new reports are forwarded to the operator's\n"
    "Metrics service; otherwise CMD runs with the environment unchanged.\n"
    "Each --package is made importable first: a folder goes on PYTHONPATH; a file\n"
    "(sdist, wheel) or an http(s):// URL is installed with pip into a virtual\n"
    "environment (made with PYTHON, seeing its packages) whose bin/ leads CMD's PATH.\n"
    "Exits with CMD's exit code (128+N when signal N killed it); 138 when CMD\n"
    "succeeded but its last report was not delivered within\n"
    "KUBETRAIN_METRICS_DEADLINE (default 60s); 127 when CMD is not found; 3 when\n"
    "a package is missing or cannot be installed.\n"
    "\n"
    "flags:";

struct ExecArgs {
  absl::Duration poll_interval = absl::Seconds(1);
  std::vector<std::string> packages;
  std::string python = "python3";
  std::vector<std::string> command;
};

absl::Status Usage(const std::string& message) {
  return WithExitCode(absl::InvalidArgumentError(message), kExitUsage);
}

// The flags, with their help and defaults; values land in `parsed`. The
// command and its own flags, after `--` or from the first argument that is
// not a flag, are left to the app's remaining().
void DefineExecFlags(CLI::App& app, ExecArgs* parsed) {
  flags::Configure(app, 28);
  app.prefix_command();
  app.add_option_function<std::string>(
         "--poll-interval",
         [parsed](const std::string& value) {
           if (!absl::ParseDuration(value, &parsed->poll_interval) ||
               parsed->poll_interval <= absl::ZeroDuration()) {
             flags::Reject(absl::StrCat("--poll-interval=", value,
                                        ": must be a positive duration such as 500ms or 2s"));
           }
         },
         "how often to read the metric file")
      ->type_name("DURATION")
      ->default_str(absl::FormatDuration(parsed->poll_interval));
  // One value per --package, so the command after it is not taken for another.
  app.add_option("--package", parsed->packages,
                 "a folder, sdist, wheel or http(s):// URL (repeatable)")
      ->type_name("P")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option_function<std::string>(
         "--python",
         [parsed](const std::string& value) {
           if (value.empty()) flags::Reject("--python needs a value, a Python interpreter");
           parsed->python = value;
         },
         "the Python that makes the environment")
      ->type_name("PYTHON")
      ->default_str(parsed->python);
}

absl::StatusOr<ExecArgs> ParseExecArgs(const std::vector<std::string>& args) {
  ExecArgs parsed;
  CLI::App app(kDescription);
  DefineExecFlags(app, &parsed);
  app.set_help_flag();  // RunExec answers --help before the command
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    flags::ParseProblem problem = flags::Classify(app, error);
    if (problem.kind != flags::ParseProblem::Kind::kMissingValue) return Usage(problem.subject);
    const std::string& name = problem.subject;
    const char* example = name == "--poll-interval" ? "a duration, e.g. 2s"
                          : name == "--package"     ? "a folder, file or URL"
                                                    : "a Python interpreter, e.g. python3";
    return Usage(absl::StrCat(name, " needs a value, ", example));
  }
  parsed.command = app.remaining();
  // CLI11 keeps a leading `--`; a leading flag it does not know is not a command.
  if (!parsed.command.empty() && parsed.command.front() == "--") {
    parsed.command.erase(parsed.command.begin());
  } else if (!parsed.command.empty() && absl::StartsWith(parsed.command.front(), "-")) {
    return Usage(absl::StrCat("unknown flag ", parsed.command.front()));
  }
  if (parsed.command.empty()) return Usage("no command: kubetrain-runtime exec -- CMD [ARGS...]");
  return parsed;
}

std::string ExecHelp() {
  ExecArgs defaults;
  CLI::App app(kDescription);
  DefineExecFlags(app, &defaults);
  return app.help();
}

int Fail(const absl::Status& status) {
  return FailWithExitCode("kubetrain-runtime exec: ", status);
}

int CannotRun(const std::string& command, int error) {
  std::cerr << "kubetrain-runtime exec: " << command << ": "
            << (error == ENOENT ? "command not found" : std::strerror(error)) << std::endl;
  return error == ENOENT ? kExitCommandNotFound : kExitCannotExecute;
}

// A spawn error names the command and what failed.
int CannotRun(const absl::Status& status) {
  std::cerr << "kubetrain-runtime exec: " << status.message() << std::endl;
  return absl::IsNotFound(status) ? kExitCommandNotFound : kExitCannotExecute;
}

std::vector<char*> Argv(std::vector<std::string>& strings) {
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  return argv;
}

// The child's environment: ours; when reporting, with the metric file set
// and the operator's reporting variables taken out.
std::vector<std::string> ChildEnvironment(const std::string& metric_file, bool reporting) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (reporting && (name == hypertune::kMetricFileEnv || name == kMetricsAddrEnv ||
                      name == "KUBETRAIN_METRICS_TOKEN")) {
      continue;
    }
    env.push_back(entry);
  }
  if (reporting) env.push_back(absl::StrCat(hypertune::kMetricFileEnv, "=", metric_file));
  return env;
}

// Sets NAME=VALUE entries of `env`, replacing any earlier value.
void SetVariables(std::vector<std::string>& env,
                  const std::vector<std::pair<std::string, std::string>>& vars) {
  for (const auto& [name, value] : vars) {
    // A named prefix, not the binding: clang 14 cannot capture structured bindings.
    const std::string prefix = name + "=";
    std::erase_if(env, [&](const std::string& entry) { return absl::StartsWith(entry, prefix); });
    env.push_back(absl::StrCat(prefix, value));
  }
}

std::string GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// Removes the directory when it goes out of scope.
struct TempDir {
  std::filesystem::path path;
  ~TempDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
};

absl::StatusOr<std::filesystem::path> MakePrivateDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = (std::filesystem::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") /
                         "kubetrain-exec-XXXXXX")
                            .string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a directory like ", pattern, ": ", std::strerror(errno)));
  }
  return std::filesystem::path(pattern);
}

// Step 4 and 5: the outcome of the trial's last report, waited for on a
// thread of its own so that a termination signal is seen while it is on the
// way. Returns exec's exit code.
int FinishReporting(TrialReporter& reporter, int child_code, int signals, int termination,
                    const std::filesystem::path& private_dir) {
  auto outcome = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> delivered = outcome->get_future();
  // Detached: when exec stops waiting it exits at once, finished or not.
  std::thread([&reporter, outcome] { outcome->set_value(reporter.Finish()); }).detach();
  absl::Time give_up = termination != 0 ? absl::Now() + kTerminationGrace : absl::InfiniteFuture();
  while (delivered.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) {
      std::cerr << "kubetrain-runtime exec: stopped by signal " << termination
                << " before the trial's last metrics report reached " << reporter.address()
                << std::endl;
      std::error_code ignored;
      std::filesystem::remove_all(private_dir, ignored);
      // Nothing else of this process needs an orderly end, and the
      // reporter's thread is still sending.
      std::_Exit(child_code != kExitOk ? child_code : 128 + termination);
    }
    pollfd ready = {signals, POLLIN, 0};
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(std::min(left, absl::Milliseconds(50))), 1, 50));
    if (poll(&ready, 1, wait_ms) > 0) {
      const int sig = ReadTerminationSignal(signals, 0);
      if (sig != 0 && termination == 0) {
        termination = sig;
        give_up = absl::Now() + kTerminationGrace;
      }
    }
  }
  absl::Status status = delivered.get();
  if (status.ok()) return child_code;
  if (child_code != kExitOk) {
    std::cerr << "kubetrain-runtime exec: warning: " << status.message() << std::endl;
    return child_code;
  }
  return Fail(status);
}

// Runs the command as our child: installs its packages first, then forwards
// its reports when there is a reporter, and termination signals either way.
int RunAsChild(ExecArgs& exec, const PackagePlan& plan, TrialReporter* reporter) {
  const std::vector<std::string>& command = exec.command;
  absl::StatusOr<std::filesystem::path> dir = MakePrivateDir();
  if (!dir.ok()) return Fail(dir.status());
  TempDir cleanup{*dir};
  const std::string metric_file = (*dir / "output.metrics").string();
  std::vector<std::string> env_strings = ChildEnvironment(metric_file, reporter != nullptr);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> package_vars = PreparePackages(
      plan, exec.python, *dir / "venv", env_strings, GetEnv("PATH"), GetEnv("PYTHONPATH"));
  if (!package_vars.ok()) return Fail(package_vars.status());
  SetVariables(env_strings, *package_vars);
  // Before the child starts, so that neither a signal to us nor its exit is
  // missed. (Caught signals are reset to their default in the child by exec.)
  absl::StatusOr<int> signals = CatchSignalsInAPipe();
  if (!signals.ok()) return Fail(signals.status());

  // Looked up on the child's PATH, which may lead with the packages'
  // environment.
  absl::StatusOr<pid_t> spawned =
      process::Spawn({.argv = command, .env = env_strings, .search_path = true});
  if (!spawned.ok()) return CannotRun(spawned.status());
  const pid_t child = *spawned;

  const int interval_ms =
      static_cast<int>(std::max<int64_t>(absl::ToInt64Milliseconds(exec.poll_interval), 1));
  hypertune::HypertuneFileFollower follower;
  int wait_status = 0;
  int termination = 0;  // the SIGTERM or SIGINT that arrived, if one did
  for (;;) {
    pollfd ready = {*signals, POLLIN, 0};
    if (poll(&ready, 1, interval_ms) > 0) {
      if (int sig = ReadTerminationSignal(*signals, child); sig != 0) termination = sig;
    }
    // As a container's first process, exec also inherits the child's own
    // orphans (data-loader workers, shell wrappers): reap every exited one,
    // keeping the child's status.
    bool child_done = false;
    int wait_errno = 0;
    for (;;) {
      int status = 0;
      const pid_t done = waitpid(-1, &status, WNOHANG);
      if (done <= 0) {
        if (done < 0 && errno != EINTR && errno != ECHILD) wait_errno = errno;
        break;
      }
      if (done == child) {
        wait_status = status;
        child_done = true;
      }
    }
    // Read after the child has exited too: its last report is in the file.
    if (reporter != nullptr) {
      ForwardNewReports(follower, metric_file, *reporter, "kubetrain-runtime exec");
    }
    if (child_done) break;
    if (wait_errno != 0) {
      return Fail(absl::InternalError(
          absl::StrCat("waiting for ", command[0], ": ", std::strerror(wait_errno))));
    }
  }
  const int child_code = process::DecodeWaitStatus(wait_status).code();
  if (reporter == nullptr) return child_code;
  return FinishReporting(*reporter, child_code, *signals, termination, *dir);
}

// Whether this replica's reports count: the chief's of the cluster TF_CONFIG
// describes. A TF_CONFIG this runtime cannot read is the trainer's business,
// not a reason to drop its reports: such a replica forwards.
bool IsChief() {
  const char* tf_config = std::getenv("TF_CONFIG");
  absl::StatusOr<dist::ClusterSpec> cluster =
      dist::ClusterSpec::FromTfConfig(tf_config != nullptr ? tf_config : "");
  return !cluster.ok() || cluster->IsChief();
}

int RunExec(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--" || !absl::StartsWith(arg, "-")) break;  // the command's own flags follow
    if (arg == "--help" || arg == "-h") {
      std::cout << ExecHelp();
      return kExitOk;
    }
  }
  absl::StatusOr<ExecArgs> parsed = ParseExecArgs(args);
  if (!parsed.ok()) {
    std::cerr << "kubetrain-runtime exec: " << parsed.status().message() << "\n\n" << ExecHelp();
    return ExitCodeFor(parsed.status());
  }
  absl::StatusOr<std::unique_ptr<TrialReporter>> reporter = std::unique_ptr<TrialReporter>();
  if (IsChief()) reporter = TrialReporter::FromEnvironment(std::cerr);
  if (!reporter.ok()) return Fail(reporter.status());
  absl::StatusOr<PackagePlan> plan = PlanPackages(parsed->packages);
  if (!plan.ok()) return Fail(plan.status());
  if (*reporter == nullptr && plan->installs.empty()) {
    // Folders only, if any: they need PYTHONPATH, not a parent.
    std::vector<std::string> env_strings = ChildEnvironment("", /*reporting=*/false);
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> vars =
        PreparePackages(*plan, parsed->python, {}, {}, GetEnv("PATH"), GetEnv("PYTHONPATH"));
    if (!vars.ok()) return Fail(vars.status());
    SetVariables(env_strings, *vars);
    std::vector<char*> argv = Argv(parsed->command);
    std::vector<char*> envp = Argv(env_strings);
    execvpe(argv[0], argv.data(), envp.data());
    return CannotRun(parsed->command[0], errno);
  }
  return RunAsChild(*parsed, *plan, reporter->get());
}

}  // namespace

KUBETRAIN_RUNTIME_SUBCOMMAND(exec,
                             "run a trainer that uses cloudml-hypertune; forward its reports to "
                             "the operator",
                             RunExec);

}  // namespace kubetrain::runtime::cmd
