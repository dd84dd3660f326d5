// `kubetrain local serve` (the local controller) and `kubetrain local train`
// (gcloud's local training: the cluster as processes on this machine).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/defaults.h"
#include "api/validation.h"
#include "cli/commands.h"
#include "cli/jobs_format.h"
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
      {"slots", "N",
       "processes that run at once: a job (a trial) starts when all of its processes have a "
       "slot, in submission order; one with more processes than slots runs alone; 0: no limit "
       "(default $KUBETRAIN_LOCAL_SLOTS, else this machine's CPUs)"},
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
  absl::StatusOr<int> slots = LocalSlots(parsed.Flag("slots"));
  if (!slots.ok()) {
    err << "kubetrain local serve: " << slots.status().message() << "\n";
    return kExitUsage;
  }
  options.slots = *slots;
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

// How long the other replicas of `local train` have to end by themselves
// once the master has succeeded: workers finish their last step, parameter
// servers wait a few seconds for them (ParameterServerOptions::finish_grace).
constexpr absl::Duration kFinishGrace = absl::Seconds(30);
// How long a replica sent SIGTERM has before SIGKILL.
constexpr absl::Duration kStopGrace = absl::Seconds(10);

// One replica of `local train`: its process and the pipes of its output.
struct LocalChild {
  pid_t pid = 0;
  std::string task;
  struct Stream {
    int fd = -1;  // our read end; -1 once it is at its end
    bool is_stderr = false;
    std::string partial;  // a line not ended yet
  };
  std::array<Stream, 2> streams;
  bool exited = false;
};

// Prints each complete line of `text` (and, at the end of the stream, the
// rest) as a `stream-logs` line of `task`.
void PrintLines(const std::string& task, LocalChild::Stream& stream, absl::string_view text,
                bool at_end, std::ostream& out) {
  auto print = [&](const std::string& line) {
    out << FormatLogEntry(LogSeverity(stream.is_stderr, line),
                          absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()), task, "", line)
        << "\n";
  };
  stream.partial.append(text.data(), text.size());
  size_t start = 0;
  for (size_t newline; (newline = stream.partial.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    print(stream.partial.substr(start, newline - start));
  }
  stream.partial.erase(0, start);
  if (at_end && !stream.partial.empty()) {
    print(stream.partial);
    stream.partial.clear();
  }
  out.flush();
}

// Runs until every replica has ended, printing their lines as they come;
// returns the master's exit code (children.front() is the master). A master
// that fails stops the others at once; one that succeeds leaves them
// kFinishGrace to end on their own (they are stopped after it). SIGINT and
// SIGTERM stop every replica.
int SuperviseLocalTraining(std::vector<LocalChild>& children, std::ostream& out) {
  int master_code = 1;
  std::optional<absl::Time> stop_others_at;
  bool others_stopped = false;
  // When the first SIGTERM went out: what is left SIGKILL'd kStopGrace later.
  std::optional<absl::Time> kill_at;
  auto stop = [&](bool master_too) {
    for (size_t i = master_too ? 0 : 1; i < children.size(); ++i) {
      if (!children[i].exited) kill(children[i].pid, SIGTERM);
    }
    if (!kill_at) kill_at = absl::Now() + kStopGrace;
  };
  auto running = [&] {
    return std::any_of(children.begin(), children.end(),
                       [](const LocalChild& c) { return !c.exited; });
  };
  // Once every replica has ended, what their pipes still hold is read until
  // an empty wait (a process they started may keep a pipe open).
  for (bool draining = false;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<LocalChild*, LocalChild::Stream*>> owners;
    for (LocalChild& c : children) {
      for (LocalChild::Stream& stream : c.streams) {
        if (stream.fd < 0) continue;
        fds.push_back({.fd = stream.fd, .events = POLLIN, .revents = 0});
        owners.emplace_back(&c, &stream);
      }
    }
    if (draining && fds.empty()) break;
    const int ready = poll(fds.data(), fds.size(), 100);
    if (ready < 0 && errno != EINTR) break;
    if (draining && ready == 0) break;
    for (size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [child, stream] = owners[i];
      char buffer[65536];
      const ssize_t n = read(stream->fd, buffer, sizeof(buffer));
      if (n > 0) {
        PrintLines(child->task, *stream, absl::string_view(buffer, static_cast<size_t>(n)), false,
                   out);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        PrintLines(child->task, *stream, "", true, out);
        close(stream->fd);
        stream->fd = -1;
      }
    }
    if (draining) continue;
    if (g_interrupted) {
      g_interrupted = 0;
      stop(/*master_too=*/true);
    }
    int status = 0;
    for (pid_t done; (done = waitpid(-1, &status, WNOHANG)) > 0;) {
      const int code = process::DecodeWaitStatus(status).code();
      for (LocalChild& c : children) {
        if (c.pid != done) continue;
        c.exited = true;
        out << "kubetrain local train: " << c.task << " exited with code " << code << std::endl;
      }
      if (done != children.front().pid) continue;
      master_code = code;
      if (code == 0) {
        stop_others_at = absl::Now() + kFinishGrace;
      } else {
        stop(/*master_too=*/false);
      }
    }
    if (stop_others_at && !others_stopped && absl::Now() >= *stop_others_at) {
      others_stopped = true;
      for (size_t i = 1; i < children.size(); ++i) {
        if (children[i].exited) continue;
        out << "kubetrain local train: stopping " << children[i].task << ": still running "
            << absl::FormatDuration(kFinishGrace) << " after the master ended" << std::endl;
      }
      stop(/*master_too=*/false);
    }
    if (kill_at && absl::Now() >= *kill_at) {
      for (LocalChild& c : children) {
        if (!c.exited) kill(c.pid, SIGKILL);
      }
    }
    if (!running()) draining = true;
  }
  // Pipes a process the replicas started still holds: what they have of a
  // line is printed, then they are let go.
  for (LocalChild& c : children) {
    for (LocalChild::Stream& stream : c.streams) {
      if (stream.fd < 0) continue;
      PrintLines(c.task, stream, "", true, out);
      close(stream.fd);
    }
  }
  return master_code;
}

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
  // No runtimeVersion or pythonVersion here (no flags set them): the module
  // runs on this machine's python3.
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

  std::vector<LocalChild> children;
  // Without SA_RESTART, so that poll() below returns on a signal and the
  // replicas are stopped.
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  auto stop_started = [&] {
    for (const LocalChild& c : children) kill(c.pid, SIGTERM);
  };
  const std::string runtime = RuntimeBinary();
  for (const core::DesiredReplica& replica : replicas) {
    std::vector<std::string> argv;
    std::vector<std::pair<std::string, std::string>> env = replica.env;
    if (!input->python_module().empty()) {
      argv = {"python3", "-m", input->python_module()};
      const char* existing = std::getenv("PYTHONPATH");
      env.emplace_back("PYTHONPATH",
                       package_parent + (existing && *existing ? std::string(":") + existing : ""));
      // Its output comes through a pipe: line by line, as on a terminal.
      env.emplace_back("PYTHONUNBUFFERED", "1");
    } else {
      argv = {runtime, "train"};
    }
    argv.insert(argv.end(), replica.args.begin(), replica.args.end());
    std::optional<std::string> executable = local::FindExecutable(argv[0]);
    if (!executable.has_value()) {
      err << "kubetrain local train: \"" << argv[0] << "\" not found\n";
      stop_started();
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
    // Each replica's stdout and stderr come through pipes of ours, so that
    // its lines are printed with its task name, as `jobs stream-logs` does.
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) {
      err << "kubetrain local train: pipe: " << std::strerror(errno) << "\n";
      stop_started();
      return kExitFailed;
    }
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
      err << "kubetrain local train: pipe: " << std::strerror(errno) << "\n";
      close(out_pipe[0]);
      close(out_pipe[1]);
      stop_started();
      return kExitFailed;
    }
    // As FindExecutable found it: on our PATH, unless the replica's
    // environment sets its own.
    absl::StatusOr<pid_t> pid = process::Spawn({
        .argv = argv,
        .env = env_strings,
        .search_path = true,
        .out = process::Stream::Fd(out_pipe[1]),
        .err = process::Stream::Fd(err_pipe[1]),
        // Children die with this command, whatever ends it.
        .parent_death_signal = SIGKILL,
    });
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (!pid.ok()) {
      close(out_pipe[0]);
      close(err_pipe[0]);
      err << "kubetrain local train: " << pid.status().message() << "\n";
      stop_started();
      return kExitFailed;
    }
    LocalChild child;
    child.pid = *pid;
    child.task = local::LogTaskName(replica.key);
    child.streams[0].fd = out_pipe[0];
    child.streams[1].fd = err_pipe[0];
    child.streams[1].is_stderr = true;
    children.push_back(std::move(child));
  }
  return SuperviseLocalTraining(children, out);
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
