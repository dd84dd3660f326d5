// `kubetrain local serve` (the local controller) and `kubetrain local train`
// (gcloud's local training: the cluster as processes on this machine).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <ostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/defaults.h"
#include "api/validation.h"
#include "cli/commands.h"
#include "cli/local_backend.h"
#include "common/process/process.h"
#include "operator/core/reconciler.h"
#include "operator/local/process_launcher.h"

extern char** environ;

namespace kubetrain::cli {
namespace {

std::vector<FlagSpec> ServeFlags() {
  return {
      {"exit-when-idle", "", "exit once no job has needed the controller for a few seconds"},
      {"quiet-if-running", "", "when another local controller already runs, exit 0 saying nothing"},
  };
}

int Serve(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ParsedArgs parsed = ParseArgs(args, ServeFlags());
  if (!parsed.error.empty()) {
    err << "kubetrain local serve: " << parsed.error << "\n";
    return kExitUsage;
  }
  if (!parsed.positional.empty()) {
    err << "kubetrain local serve: takes no positional arguments\n";
    return kExitUsage;
  }
  ServeOptions options;
  options.exit_when_idle = parsed.Switch("exit-when-idle");
  options.quiet_if_running = parsed.Switch("quiet-if-running");
  return ServeLocalController(KubetrainHome(), options, out, err);
}

// --`flag` as a whole number in [low, high] (`what` says what it is in the
// error), or `fallback` when the flag is not given.
bool ParseNumber(const ParsedArgs& parsed, const std::string& flag, int64_t fallback, int64_t low,
                 int64_t high, const std::string& what, int64_t* value, std::ostream& err) {
  *value = fallback;
  const std::string* text = parsed.Flag(flag);
  if (text == nullptr) return true;
  if (!absl::SimpleAtoi(*text, value) || *value < low || *value > high) {
    err << "kubetrain local train: --" << flag << ": " << what << " from " << low << " to " << high
        << ", got \"" << *text << "\"\n";
    return false;
  }
  return true;
}

bool ParseCount(const ParsedArgs& parsed, const std::string& flag, int64_t fallback, int64_t* value,
                std::ostream& err) {
  return ParseNumber(parsed, flag, fallback, 0, 1000, "a number", value, err);
}

// A TCP port for the first replica; the others take the next ones.
bool ParsePort(const ParsedArgs& parsed, const std::string& flag, int64_t fallback, int64_t* value,
               std::ostream& err) {
  return ParseNumber(parsed, flag, fallback, 1, 65535, "a TCP port", value, err);
}

volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

constexpr int64_t kDefaultWorkers = 2;
constexpr int64_t kDefaultParameterServers = 2;
constexpr int64_t kDefaultEvaluators = 0;
constexpr int64_t kDefaultStartPort = 27182;

std::vector<FlagSpec> TrainFlags() {
  return {
      {"module-name", "MODULE",
       "the Python module to run (python3 -m MODULE); without it, kubetrain-runtime's trainer"},
      {"package-path", "DIR", "the folder of the module's package"},
      {"job-dir", "DIR", "where the job writes its outputs; the trainer is given --job-dir DIR"},
      {"distributed", "", "a master, workers and parameter servers, each its own process"},
      {"worker-count", "N",
       absl::StrCat("workers, with --distributed (default ", kDefaultWorkers, ")")},
      {"parameter-server-count", "N",
       absl::StrCat("parameter servers, with --distributed (default ", kDefaultParameterServers,
                    ")")},
      {"evaluator-count", "N",
       absl::StrCat("evaluators, with --distributed (default ", kDefaultEvaluators, ")")},
      {"start-port", "PORT",
       absl::StrCat("the first of the replicas' consecutive ports (default ", kDefaultStartPort,
                    ")")},
      {"use-chief-in-tf-config", "", "name the master \"chief\" in TF_CONFIG, not \"master\""},
  };
}

int Train(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ParsedArgs parsed = ParseArgs(args, TrainFlags());
  if (!parsed.error.empty()) {
    err << "kubetrain local train: " << parsed.error << "\n";
    return kExitUsage;
  }
  if (!parsed.positional.empty()) {
    err << "kubetrain local train: unexpected argument \"" << parsed.positional[0]
        << "\"; trainer arguments go after --\n";
    return kExitUsage;
  }
  const bool distributed = parsed.Switch("distributed");
  int64_t workers = 0, ps = 0, evaluators = 0, start_port = 0;
  if (!ParseCount(parsed, "worker-count", kDefaultWorkers, &workers, err) ||
      !ParseCount(parsed, "parameter-server-count", kDefaultParameterServers, &ps, err) ||
      !ParseCount(parsed, "evaluator-count", kDefaultEvaluators, &evaluators, err) ||
      !ParsePort(parsed, "start-port", kDefaultStartPort, &start_port, err)) {
    return kExitUsage;
  }
  if (!distributed && (parsed.Has("worker-count") || parsed.Has("parameter-server-count") ||
                       parsed.Has("evaluator-count"))) {
    err << "kubetrain local train: --worker-count, --parameter-server-count and --evaluator-count "
           "need "
           "--distributed\n";
    return kExitUsage;
  }

  v1::TrainingJob job;
  job.set_api_version(api::kApiVersion);
  job.set_kind(api::kKind);
  job.mutable_metadata()->set_name("local_train");
  job.mutable_metadata()->set_uid("local-train");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  if (distributed) {
    input->set_scale_tier(v1::TrainingInput::CUSTOM);
    input->set_master_type("standard");
    if (workers > 0) {
      input->set_worker_type("standard");
      input->set_worker_count(workers);
    }
    if (ps > 0) {
      input->set_parameter_server_type("standard");
      input->set_parameter_server_count(ps);
    }
    if (evaluators > 0) {
      input->set_evaluator_type("standard");
      input->set_evaluator_count(evaluators);
    }
  }
  input->set_use_chief_in_tf_config(parsed.Switch("use-chief-in-tf-config"));
  if (const std::string* module = parsed.Flag("module-name")) input->set_python_module(*module);
  std::string package_parent;
  if (const std::string* package = parsed.Flag("package-path")) {
    absl::StatusOr<std::string> search_path =
        PackageSearchPath(*package, parsed.Flag("module-name"));
    if (!search_path.ok()) {
      err << "kubetrain local train: " << search_path.status().message() << "\n";
      return kExitUsage;
    }
    package_parent = *search_path;
  }
  if (!input->python_module().empty()) {
    // Where the module's code is: the package's folder, else the current one
    // (python3 -m looks there first).
    std::error_code ec;
    input->add_package_uris(package_parent.empty() ? std::filesystem::current_path(ec).string()
                                                   : package_parent);
  }
  if (const std::string* dir = parsed.Flag("job-dir")) input->set_job_dir(*dir);
  for (const std::string& arg : parsed.after_double_dash) input->add_args(arg);
  std::vector<api::FieldError> errors = api::Validate(job);
  if (!errors.empty()) {
    err << api::FormatErrors(errors, "kubetrain local train");
    return kExitUsage;
  }

  // Consecutive ports from --start-port, in the order replicas are listed.
  std::map<std::string, int> ports;
  core::ReconcileOptions options;
  options.services = false;
  options.address = core::LoopbackAddresses([&](std::string_view name) {
    auto [it, added] =
        ports.emplace(std::string(name), static_cast<int>(start_port + ports.size()));
    return it->second;
  });
  std::vector<core::DesiredReplica> replicas = core::DesiredReplicas(job, "", {}, options);
  if (start_port + static_cast<int64_t>(ports.size()) - 1 > 65535) {
    err << "kubetrain local train: --start-port " << start_port << ": the " << ports.size()
        << " replicas need ports up to " << start_port + static_cast<int64_t>(ports.size()) - 1
        << ", past 65535\n";
    return kExitUsage;
  }

  struct Child {
    pid_t pid;
    std::string task;
  };
  std::vector<Child> children;
  // Without SA_RESTART, so that the waitpid below returns on a signal and
  // the replicas are stopped (signal() would restart it and wait for ever).
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const std::string runtime = RuntimeBinary();
  for (const core::DesiredReplica& replica : replicas) {
    std::vector<std::string> argv;
    std::vector<std::pair<std::string, std::string>> env = replica.env;
    if (!input->python_module().empty()) {
      argv = {"python3", "-m", input->python_module()};
      const char* existing = std::getenv("PYTHONPATH");
      env.emplace_back("PYTHONPATH",
                       package_parent + (existing && *existing ? std::string(":") + existing : ""));
    } else {
      argv = {runtime, "train"};
    }
    argv.insert(argv.end(), replica.args.begin(), replica.args.end());
    std::optional<std::string> executable = local::FindExecutable(argv[0]);
    if (!executable.has_value()) {
      err << "kubetrain local train: \"" << argv[0] << "\" not found\n";
      for (const Child& c : children) kill(c.pid, SIGTERM);
      return kExitFailed;
    }
    std::map<std::string, std::string> merged;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry(*e);
      size_t eq = entry.find('=');
      if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    for (const auto& [k, v] : env) merged[k] = v;
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
    out << "kubetrain local train: starting " << local::LogTaskName(replica.key) << " on "
        << options.address(replica.name, replica.key, replica.port) << std::endl;
    // As FindExecutable found it: on our PATH, unless the replica's
    // environment sets its own.
    absl::StatusOr<pid_t> pid = process::Spawn({
        .argv = argv,
        .env = env_strings,
        .search_path = true,
        // Children die with this command, whatever ends it.
        .parent_death_signal = SIGKILL,
    });
    if (!pid.ok()) {
      err << "kubetrain local train: " << pid.status().message() << "\n";
      for (const Child& c : children) kill(c.pid, SIGTERM);
      return kExitFailed;
    }
    children.push_back({*pid, local::LogTaskName(replica.key)});
  }
  // The exit code is the master's; the others are stopped when it ends.
  int master_code = 1;
  const pid_t master = children.front().pid;
  for (;;) {
    int status = 0;
    pid_t done = waitpid(-1, &status, 0);
    if (done < 0) {
      if (errno == EINTR && g_interrupted) {
        for (const Child& c : children) kill(c.pid, SIGTERM);
        g_interrupted = 0;
        continue;
      }
      if (errno == EINTR) continue;
      break;
    }
    const int code = process::DecodeWaitStatus(status).code();
    for (const Child& c : children) {
      if (c.pid == done && done != master) {
        out << "kubetrain local train: " << c.task << " exited with code " << code << std::endl;
      }
    }
    if (done == master) {
      master_code = code;
      out << "kubetrain local train: master-replica-0 exited with code " << code << std::endl;
      for (const Child& c : children) {
        if (c.pid != master) kill(c.pid, SIGTERM);
      }
    }
  }
  return master_code;
}

}  // namespace

std::vector<Command> LocalCommands() {
  return {
      {{"local", "serve"},
       "run the local controller in the foreground (--exit-when-idle)",
       Serve,
       "[--exit-when-idle] [--quiet-if-running]",
       ServeFlags()},
      {{"local", "train"},
       "train on this machine (--distributed --worker-count --parameter-server-count ...)",
       Train,
       "[--module-name MODULE --package-path DIR] [--job-dir DIR] [--distributed [--worker-count "
       "N] "
       "[--parameter-server-count N] [--evaluator-count N] [--start-port PORT] "
       "[--use-chief-in-tf-config]] [-- TRAINER_ARGS...]",
       TrainFlags()},
  };
}

}  // namespace kubetrain::cli
