// `kubetrain jobs submit training | describe | list | cancel | stream-logs`,
// shaped like `gcloud ai-platform jobs …`, on the local backend.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "api/job_file.h"
#include "api/packages.h"
#include "api/validation.h"
#include "cli/commands.h"
#include "cli/jobs_cluster.h"
#include "cli/jobs_format.h"
#include "cli/local_backend.h"
#include "google/protobuf/util/time_util.h"
#include "operator/core/reconciler.h"

namespace kubetrain::cli {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(300);

std::string RandomUid() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
  const uint64_t a = rng(), b = rng();
  char text[40];
  snprintf(text, sizeof(text), "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
           static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
           static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
           static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return text;
}

// Opens the local store, or prints why not.
std::unique_ptr<local::JobStore> OpenStoreOrReport(const std::string& command, std::ostream& err) {
  absl::StatusOr<std::unique_ptr<local::JobStore>> store = OpenLocalStore(KubetrainHome());
  if (!store.ok()) {
    err << "kubetrain " << command << ": " << store.status().message() << "\n";
    return nullptr;
  }
  return *std::move(store);
}

// The cluster side, or nullptr after printing why not.
std::unique_ptr<ClusterJobs> ConnectOrReport(const std::string& command, const ParsedArgs& parsed,
                                             std::ostream& err) {
  ClusterTarget target;
  if (const std::string* ns = parsed.Flag("namespace")) target.namespace_name = *ns;
  if (const std::string* context = parsed.Flag("context")) target.context = *context;
  if (const std::string* kubeconfig = parsed.Flag("kubeconfig")) target.kubeconfig = *kubeconfig;
  absl::StatusOr<std::unique_ptr<ClusterJobs>> cluster = ClusterJobs::Connect(target);
  if (!cluster.ok()) {
    err << "kubetrain " << command << ": " << cluster.status().message() << "\n";
    return nullptr;
  }
  return *std::move(cluster);
}

// Polls a job on the cluster until it ends, printing progress changes.
absl::StatusOr<v1::TrainingJob> FollowClusterJob(ClusterJobs& cluster, const std::string& name,
                                                 std::ostream& out) {
  std::string last;
  for (;;) {
    absl::StatusOr<v1::TrainingJob> job = cluster.Get(name);
    if (!job.ok()) return job.status();
    const std::string line = ProgressLine(*job);
    if (!line.empty() && line != last) out << "[kubetrain] " << line << "\n" << std::flush;
    last = line;
    if (core::IsTerminal(job->status().state())) return job;
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

// The local controller exits when idle, and may have died (killed, the
// machine restarted) while a job was unfinished. A command that shows an
// unfinished job starts one again, so that the state it shows moves on, as a
// Cloud ML job's does without anyone watching it.
void ResumeLocalController(const std::string& command, std::ostream& err) {
  if (absl::Status s = EnsureLocalController(KubetrainHome()); !s.ok()) {
    err << "kubetrain " << command << ": warning: no local controller is running and none could "
        << "be started (" << s.message() << "); run `kubetrain local serve`\n";
  }
}

int UsageError(const std::string& command, const std::string& message, std::ostream& err) {
  err << "kubetrain " << command << ": " << message << "\n";
  return kExitUsage;
}

// Local jobs have no namespace: -n/--namespace with the local backend is
// refused rather than ignored.
std::optional<int> RefuseNamespaceOnLocal(const std::string& command, const ParsedArgs& parsed,
                                          std::ostream& err) {
  if (!parsed.Has("namespace") || !UseLocalBackend(parsed.Has("local"))) return std::nullopt;
  return UsageError(command,
                    "-n/--namespace names a Kubernetes namespace; the local backend (--local or "
                    "KUBETRAIN_BACKEND=local) has none",
                    err);
}

// ---- stream-logs

struct LogFollower {
  std::string home;
  std::string job;
  std::string task_filter;                        // "" all
  std::string trial_filter;                       // "" all
  std::map<std::string, std::streamoff> offsets;  // per log file
  size_t events_shown = 0;

  // Prints what was added since the last call, in time order.
  void Poll(local::JobStore& store, std::ostream& out) {
    struct Entry {
      double time;
      std::string line;
    };
    std::vector<Entry> entries;
    if (task_filter.empty() || task_filter == "service") {
      absl::StatusOr<std::vector<local::StoredEvent>> events = store.Events(job);
      if (events.ok()) {
        for (size_t i = events_shown; i < events->size(); ++i) {
          const local::StoredEvent& e = (*events)[i];
          // With --trial, another trial's events are left out; the job's own stay.
          const std::string trial = EventTrial(e.message);
          if (!trial_filter.empty() && !trial.empty() && trial != trial_filter) continue;
          const double t = absl::ToDoubleSeconds(e.time - absl::UnixEpoch());
          entries.push_back({t, FormatLogEntry(e.type == "Warning" ? "WARNING" : "INFO", t,
                                               "service", trial, e.reason + ": " + e.message)});
        }
        events_shown = events->size();
      }
    }
    const std::filesystem::path logs = local::JobDir(home, job) + "/logs";
    std::error_code ec;
    if (std::filesystem::exists(logs, ec)) {
      for (const auto& file : std::filesystem::recursive_directory_iterator(logs, ec)) {
        if (!file.is_regular_file() || file.path().extension() != ".log") continue;
        const std::string task = file.path().stem().string();
        std::string trial;
        const std::string parent = file.path().parent_path().filename().string();
        if (parent.rfind("trial-", 0) == 0) trial = parent.substr(6);
        if (!task_filter.empty() && task != task_filter) continue;
        if (!trial_filter.empty() && trial != trial_filter) continue;
        std::ifstream in(file.path(), std::ios::binary);
        std::streamoff& offset = offsets[file.path().string()];
        in.seekg(offset);
        std::string line;
        while (std::getline(in, line)) {
          if (in.eof()) break;  // a line still being written: next time
          offset = in.tellg();
          local::LogLine parsed = local::ParseLogLine(line);
          entries.push_back(
              {parsed.time, FormatLogEntry(LogSeverity(parsed.stderr, parsed.message), parsed.time,
                                           task, trial, parsed.message)});
        }
      }
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) { return a.time < b.time; });
    for (const Entry& e : entries) out << e.line << "\n";
    out.flush();
  }
};

// Follows logs (when `logs`) and progress until the job is finished and its
// replicas are gone. Returns the final job.
absl::StatusOr<v1::TrainingJob> FollowJob(
    local::JobStore& store, const std::string& name, bool logs, const std::string& task,
    const std::string& trial, std::ostream& out, bool progress = true,
    absl::Duration poll_interval = absl::FromChrono(kPollInterval)) {
  LogFollower follower{KubetrainHome(), name, task, trial, {}, 0};
  std::string last_progress;
  const bool tty = isatty(STDOUT_FILENO) && &out == &std::cout;
  for (;;) {
    absl::StatusOr<v1::TrainingJob> job = store.GetJob(name);
    if (!job.ok()) return job.status();
    const bool finished = core::IsTerminal(job->status().state());
    if (!finished) {
      // Without a controller the job would never move on, and this loop
      // never end.
      if (absl::Status s = EnsureLocalController(KubetrainHome()); !s.ok()) {
        return absl::UnavailableError(
            absl::StrCat("job [", name, "] is ", v1::State_Name(job->status().state()),
                         " but no local controller is running and none could be started (",
                         s.message(), "); run `kubetrain local serve`"));
      }
    }
    bool replicas_left = false;
    if (finished) {
      local::RealProcessLauncher launcher;
      absl::StatusOr<bool> running = local::AnyReplicaRunning(store, launcher, name);
      replicas_left = !running.ok() || *running;
    }
    if (logs) follower.Poll(store, out);
    const std::string line = progress ? ProgressLine(*job) : "";
    if (!line.empty() && line != last_progress) {
      if (tty && !logs) {
        out << "\r\033[K" << line << std::flush;  // one line, rewritten
      } else {
        out << "[kubetrain] " << line << "\n" << std::flush;
      }
      last_progress = line;
    }
    if (finished && !replicas_left) {
      if (logs) follower.Poll(store, out);
      if (tty && !logs && !last_progress.empty()) out << "\n";
      return job;
    }
    absl::SleepFor(poll_interval);
  }
}

int StreamLogs(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs stream-logs";
  ParsedArgs parsed = ParseArgs(
      args, {"task-name", "trial", "polling-interval", "namespace", "context", "kubeconfig"},
      {"local", "allow-multiline-logs"});
  if (!parsed.error.empty()) return UsageError(command, parsed.error, err);
  if (std::optional<int> code = RefuseNamespaceOnLocal(command, parsed, err)) return *code;
  if (parsed.positional.size() != 1)
    return UsageError(command, "name one job: kubetrain jobs stream-logs JOB", err);
  const bool local = UseLocalBackend(parsed.Has("local"));
  absl::Duration poll_interval = local ? absl::FromChrono(kPollInterval) : absl::Seconds(1);
  if (const std::string* text = parsed.Flag("polling-interval")) {
    int seconds = 0;
    if (!absl::SimpleAtoi(*text, &seconds) || seconds < 1) {
      return UsageError(command, "--polling-interval: whole seconds >= 1, got \"" + *text + "\"",
                        err);
    }
    poll_interval = absl::Seconds(seconds);
  }
  if (!local) {
    std::unique_ptr<ClusterJobs> cluster = ConnectOrReport(command, parsed, err);
    if (cluster == nullptr) return kExitFailed;
    ClusterLogOptions options;
    options.task_filter = parsed.Flag("task-name") ? *parsed.Flag("task-name") : "";
    options.trial_filter = parsed.Flag("trial") ? *parsed.Flag("trial") : "";
    options.poll_interval = poll_interval;
    absl::StatusOr<v1::TrainingJob> job = cluster->FollowLogs(parsed.positional[0], options, out);
    if (!job.ok()) {
      err << "kubetrain " << command << ": " << job.status().message() << "\n";
      return kExitFailed;
    }
    return kExitOk;
  }
  std::unique_ptr<local::JobStore> store = OpenStoreOrReport(command, err);
  if (store == nullptr) return kExitFailed;
  const std::string& name = parsed.positional[0];
  absl::StatusOr<v1::TrainingJob> job = FollowJob(
      *store, name, true, parsed.Flag("task-name") ? *parsed.Flag("task-name") : "",
      parsed.Flag("trial") ? *parsed.Flag("trial") : "", out, /*progress=*/false, poll_interval);
  if (!job.ok()) {
    err << "kubetrain " << command << ": " << job.status().message() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

// ---- submit

absl::Status ApplyScaleTier(const std::string& tier, v1::TrainingInput* input) {
  // gcloud spells the tiers in lower case with dashes (basic-gpu); the
  // config file as the API does (BASIC_GPU). Both are taken.
  std::string name = absl::AsciiStrToUpper(tier);
  std::replace(name.begin(), name.end(), '-', '_');
  v1::TrainingInput::ScaleTier value;
  if (!v1::TrainingInput::ScaleTier_Parse(name, &value) ||
      value == v1::TrainingInput::SCALE_TIER_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--scale-tier: unknown tier \"", tier,
                     "\" (BASIC, STANDARD_1, PREMIUM_1, BASIC_GPU, CUSTOM)"));
  }
  input->set_scale_tier(value);
  return absl::OkStatus();
}

int PrintFinal(const v1::TrainingJob& job, const std::string& command, std::ostream& out,
               std::ostream& err) {
  const v1::State state = job.status().state();
  out << "Job [" << job.metadata().name() << "] ended " << v1::State_Name(state)
      << (job.status().error_message().empty() ? "" : ": " + job.status().error_message()) << "\n";
  return state == v1::SUCCEEDED ? kExitOk : kExitFailed;
}

// The sdist of --package-path for a cluster, which must fit the ConfigMap
// that carries it there.
absl::StatusOr<BuiltPackage> BuildClusterPackage(const std::string& package_path) {
  absl::StatusOr<BuiltPackage> built = BuildSdist(package_path);
  if (!built.ok() || built->bytes.size() <= api::kMaxConfigMapBytes) return built;
  return absl::InvalidArgumentError(absl::StrCat(
      "--package-path ", package_path, ": the package ", built->file_name, " is ",
      built->bytes.size(), " bytes, more than the ", api::kMaxConfigMapBytes,
      " bytes (1 MiB) a ConfigMap holds; serve it over http(s) and give its URL in packageUris, "
      "put it on a volume of the pod template and give its path there, or build it into an "
      "image (masterConfig.imageUri and the other roles')"));
}

int SubmitTraining(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs submit training";
  ParsedArgs parsed = ParseArgs(args,
                                {"config", "scale-tier", "module-name", "package-path", "job-dir",
                                 "region", "labels", "runtime-version", "python-version",
                                 "master-image-uri", "namespace", "context", "kubeconfig"},
                                {"stream-logs", "local", "wait", "async"});
  if (!parsed.error.empty()) return UsageError(command, parsed.error, err);
  if (std::optional<int> code = RefuseNamespaceOnLocal(command, parsed, err)) return *code;
  if (parsed.positional.size() != 1) {
    return UsageError(
        command, "name one job: kubetrain jobs submit training JOB --config FILE [-- USER_ARGS]",
        err);
  }
  const std::string name = parsed.positional[0];
  if (std::string reason = api::ValidateJobName(name); !reason.empty()) {
    return UsageError(command, absl::StrCat("job name \"", name, "\": ", reason), err);
  }

  v1::TrainingJob job;
  bool bare_config = true;
  std::string source = "command line";
  if (const std::string* config = parsed.Flag("config")) {
    source = *config;
    absl::StatusOr<std::string> text = api::ReadTextFile(*config);
    if (!text.ok()) return UsageError(command, std::string(text.status().message()), err);
    api::CheckedJob checked = api::CheckTrainingJob(*text, /*require_name=*/false);
    if (!checked.ok()) {
      err << api::FormatErrors(checked.errors, *config);
      err << "kubetrain " << command << ": " << *config
          << " is not a valid job; nothing was submitted\n";
      return kExitUsage;
    }
    if (!checked.kubeflow_kind.empty()) {
      out << *config << ": a kubeflow.org/v1 " << checked.kubeflow_kind
          << ", run as a TrainingJob:\n"
          << api::FormatMapping(checked.mapped);
    }
    job = std::move(checked.job);
    bare_config = checked.bare_config;
  }
  job.set_api_version(api::kApiVersion);
  job.set_kind(api::kKind);
  job.mutable_metadata()->set_name(name);
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  // Flags override the config file, as gcloud does.
  if (const std::string* tier = parsed.Flag("scale-tier")) {
    if (absl::Status s = ApplyScaleTier(*tier, input); !s.ok())
      return UsageError(command, std::string(s.message()), err);
  }
  if (const std::string* module = parsed.Flag("module-name")) input->set_python_module(*module);
  std::optional<BuiltPackage> cluster_package;
  if (const std::string* package = parsed.Flag("package-path")) {
    // Locally the package's parent folder goes on PYTHONPATH, so `-m pkg.module`
    // resolves; a cluster gets an sdist of it, stored in a ConfigMap.
    absl::StatusOr<std::string> search_path = PackageSearchPath(
        *package, input->python_module().empty() ? nullptr : &input->python_module());
    if (!search_path.ok())
      return UsageError(command, std::string(search_path.status().message()), err);
    input->clear_package_uris();
    if (UseLocalBackend(parsed.Has("local"))) {
      input->add_package_uris(*search_path);
    } else {
      absl::StatusOr<BuiltPackage> built = BuildClusterPackage(*package);
      if (!built.ok()) {
        err << "kubetrain " << command << ": " << built.status().message() << "\n";
        return built.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                           : kExitFailed;
      }
      input->add_package_uris(ClusterJobs::PackageUri(name, built->file_name));
      cluster_package = *std::move(built);
    }
  }
  if (const std::string* dir = parsed.Flag("job-dir")) input->set_job_dir(*dir);
  if (const std::string* region = parsed.Flag("region")) input->set_region(*region);
  if (const std::string* v = parsed.Flag("runtime-version")) input->set_runtime_version(*v);
  if (const std::string* v = parsed.Flag("python-version")) input->set_python_version(*v);
  if (const std::string* image = parsed.Flag("master-image-uri"))
    input->mutable_master_config()->set_image_uri(*image);
  for (const auto& [flag, value] : parsed.flags) {
    if (flag != "labels") continue;
    for (absl::string_view pair : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      if (kv.size() != 2 || kv[0].empty()) {
        return UsageError(command, absl::StrCat("--labels: \"", pair, "\" is not KEY=VALUE"), err);
      }
      (*job.mutable_metadata()->mutable_labels())[kv[0]] = kv[1];
    }
  }
  if (!parsed.after_double_dash.empty()) {
    input->clear_args();
    for (const std::string& arg : parsed.after_double_dash) input->add_args(arg);
  }
  std::vector<api::FieldError> errors =
      api::Validate(job, {.require_name = true, .bare_config = false});
  if (!errors.empty()) {
    err << api::FormatErrors(errors, source);
    err << "kubetrain " << command << ": the job is not valid; nothing was submitted\n";
    return kExitUsage;
  }
  (void)bare_config;
  const bool stream = parsed.Has("stream-logs") && *parsed.Flag("stream-logs") == "true";
  const bool wait = parsed.Has("wait") && *parsed.Flag("wait") == "true";
  if (!UseLocalBackend(parsed.Has("local"))) {
    std::unique_ptr<ClusterJobs> cluster = ConnectOrReport(command, parsed, err);
    if (cluster == nullptr) return kExitFailed;
    if (absl::Status s = cluster_package ? cluster->CreateWithPackage(job, *cluster_package)
                                         : cluster->Create(job);
        !s.ok()) {
      err << "kubetrain " << command << ": " << s.message() << "\n";
      return kExitFailed;
    }
    if (cluster_package) {
      out << "Package [" << cluster_package->file_name << "] stored in ConfigMap "
          << cluster->namespace_name() << "/" << ClusterJobs::PackageConfigMapName(name) << ".\n";
    }
    out << "Job [" << name << "] submitted successfully.\n"
        << "TrainingJob " << cluster->namespace_name() << "/" << api::KubernetesName(name) << "\n"
        << "  $ kubetrain jobs describe " << name << "\n";
    if (!stream && !wait) return kExitOk;
    absl::StatusOr<v1::TrainingJob> final_job;
    if (stream) {
      ClusterLogOptions options;
      options.progress = true;
      final_job = cluster->FollowLogs(name, options, out);
    } else {
      final_job = FollowClusterJob(*cluster, name, out);
    }
    if (!final_job.ok()) {
      err << "kubetrain " << command << ": " << final_job.status().message() << "\n";
      return kExitFailed;
    }
    return PrintFinal(*final_job, command, out, err);
  }

  const absl::Time now = absl::Now();
  job.mutable_metadata()->set_uid(RandomUid());
  job.mutable_metadata()->set_creation_timestamp(
      absl::FormatTime(absl::RFC3339_sec, now, absl::UTCTimeZone()));
  job.mutable_status()->set_state(v1::QUEUED);
  *job.mutable_status()->mutable_create_time() =
      google::protobuf::util::TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(now));

  const std::string home = KubetrainHome();
  std::unique_ptr<local::JobStore> store = OpenStoreOrReport(command, err);
  if (store == nullptr) return kExitFailed;
  if (absl::Status s = store->CreateJob(job); !s.ok()) {
    err << "kubetrain " << command << ": " << s.message() << "\n";
    return kExitFailed;
  }
  if (absl::Status s = EnsureLocalController(home); !s.ok()) {
    err << "kubetrain " << command << ": job [" << name
        << "] is recorded but no local controller could be "
        << "started (" << s.message() << "); run `kubetrain local serve`\n";
    return kExitFailed;
  }
  out << "Job [" << name << "] submitted successfully.\n";
  if (!stream) {
    // With --local: the commands must find the job where it is, whatever
    // KUBETRAIN_BACKEND says in the shell they are run from.
    out << "Your job is still active. You may view the status of your job with the command\n\n"
        << "  $ kubetrain jobs describe " << name << " --local\n\n"
        << "or continue streaming the logs with the command\n\n"
        << "  $ kubetrain jobs stream-logs " << name << " --local\n";
  }
  out << "jobId: " << name << "\nstate: QUEUED\n" << std::flush;
  if (!stream && !wait) return kExitOk;
  absl::StatusOr<v1::TrainingJob> final_job = FollowJob(*store, name, stream, "", "", out);
  if (!final_job.ok()) {
    err << "kubetrain " << command << ": " << final_job.status().message() << "\n";
    return kExitFailed;
  }
  return PrintFinal(*final_job, command, out, err);
}

// ---- describe, list, cancel

int Describe(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs describe";
  ParsedArgs parsed =
      ParseArgs(args, {"format", "namespace", "context", "kubeconfig"}, {"summarize", "local"});
  if (!parsed.error.empty()) return UsageError(command, parsed.error, err);
  if (std::optional<int> code = RefuseNamespaceOnLocal(command, parsed, err)) return *code;
  if (parsed.positional.size() != 1)
    return UsageError(command, "name one job: kubetrain jobs describe JOB", err);
  const std::string format = parsed.Flag("format") ? *parsed.Flag("format") : "yaml";
  if (format != "yaml" && format != "json") {
    return UsageError(command, "--format: yaml or json, got \"" + format + "\"", err);
  }
  nlohmann::json resource;
  // On a cluster, the job's recent Events follow, as `kubectl describe` ends.
  std::optional<absl::StatusOr<std::vector<JobEvent>>> events;
  if (!UseLocalBackend(parsed.Has("local"))) {
    std::unique_ptr<ClusterJobs> cluster = ConnectOrReport(command, parsed, err);
    if (cluster == nullptr) return kExitFailed;
    absl::StatusOr<v1::TrainingJob> job = cluster->Get(parsed.positional[0]);
    if (!job.ok()) {
      err << "kubetrain " << command << ": " << job.status().message() << "\n";
      return kExitFailed;
    }
    // Trials past the first 100 are ConfigMaps of the job; without the right
    // to list those, status alone is shown.
    absl::StatusOr<std::vector<v1::HyperparameterOutput>> archived = cluster->ArchivedTrials(*job);
    resource =
        JobResource(*job, archived.ok() ? *archived : std::vector<v1::HyperparameterOutput>{});
    events = cluster->Events(*job);
  } else {
    std::unique_ptr<local::JobStore> store = OpenStoreOrReport(command, err);
    if (store == nullptr) return kExitFailed;
    absl::StatusOr<v1::TrainingJob> job = store->GetJob(parsed.positional[0]);
    if (!job.ok()) {
      err << "kubetrain " << command << ": " << job.status().message() << "\n";
      return kExitFailed;
    }
    if (!core::IsTerminal(job->status().state())) ResumeLocalController(command, err);
    absl::StatusOr<std::vector<v1::HyperparameterOutput>> archived =
        store->ArchivedTrials(parsed.positional[0]);
    resource =
        JobResource(*job, archived.ok() ? *archived : std::vector<v1::HyperparameterOutput>{});
  }
  const bool summarize = parsed.Has("summarize") && *parsed.Flag("summarize") == "true";
  if (events && format == "json" && !summarize) {
    // Machine-readable like the rest: an array, or why there is none.
    if (events->ok()) {
      resource["events"] = EventsJson(**events);
    } else {
      resource["eventsError"] = std::string((*events).status().message());
    }
  }
  if (summarize) {
    out << SummarizeJob(resource);
  } else if (format == "json") {
    out << resource.dump(2) << "\n";
  } else {
    out << api::EncodeYaml(resource);
  }
  if (events && (summarize || format == "yaml")) {
    // After the YAML as comments, so the output stays one YAML document.
    const std::string prefix = summarize ? "" : "# ";
    if (summarize) out << "\n";
    if (events->ok()) {
      out << FormatEvents(**events, absl::Now(), prefix);
    } else {
      out << prefix << "Events: not shown: " << (*events).status().message() << "\n";
    }
  }
  return kExitOk;
}

int List(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs list";
  ParsedArgs parsed = ParseArgs(
      args, {"filter", "limit", "page-size", "sort-by", "namespace", "context", "kubeconfig"},
      {"local"});
  if (!parsed.error.empty()) return UsageError(command, parsed.error, err);
  if (std::optional<int> code = RefuseNamespaceOnLocal(command, parsed, err)) return *code;
  if (!parsed.positional.empty()) return UsageError(command, "takes no positional arguments", err);
  int64_t limit = -1;
  if (const std::string* text = parsed.Flag("limit")) {
    if (!absl::SimpleAtoi(*text, &limit) || limit < 1) {
      return UsageError(command, "--limit: a positive number, got \"" + *text + "\"", err);
    }
  }
  JobPredicate keep = [](const v1::TrainingJob&) { return true; };
  if (const std::string* filter = parsed.Flag("filter")) {
    absl::StatusOr<JobPredicate> predicate = ParseJobFilter(*filter);
    if (!predicate.ok()) return UsageError(command, std::string(predicate.status().message()), err);
    keep = *predicate;
  }
  absl::StatusOr<std::vector<v1::TrainingJob>> jobs;
  if (!UseLocalBackend(parsed.Has("local"))) {
    std::unique_ptr<ClusterJobs> cluster = ConnectOrReport(command, parsed, err);
    if (cluster == nullptr) return kExitFailed;
    jobs = cluster->List();
  } else {
    std::unique_ptr<local::JobStore> store = OpenStoreOrReport(command, err);
    if (store == nullptr) return kExitFailed;
    jobs = store->ListJobs();
    if (jobs.ok() && std::any_of(jobs->begin(), jobs->end(), [](const v1::TrainingJob& job) {
          return !core::IsTerminal(job.status().state());
        })) {
      ResumeLocalController(command, err);
    }
  }
  if (!jobs.ok()) {
    err << "kubetrain " << command << ": " << jobs.status().message() << "\n";
    return kExitFailed;
  }
  std::vector<std::vector<std::string>> rows = {{"JOB_ID", "STATUS", "CREATED"}};
  for (auto it = jobs->rbegin(); it != jobs->rend(); ++it) {  // newest first, as gcloud
    if (!keep(*it)) continue;
    if (limit >= 0 && static_cast<int64_t>(rows.size()) > limit) break;
    nlohmann::json resource = JobResource(*it);
    rows.push_back({it->metadata().name(), resource["state"].get<std::string>(),
                    resource.value("createTime", std::string())});
  }
  std::vector<size_t> widths(3, 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < 3; ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  if (rows.size() == 1) {
    err << "Listed 0 items.\n";
    return kExitOk;
  }
  for (const auto& row : rows) {
    out << row[0] << std::string(widths[0] - row[0].size() + 2, ' ') << row[1]
        << std::string(widths[1] - row[1].size() + 2, ' ') << row[2] << "\n";
  }
  return kExitOk;
}

int Cancel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs cancel";
  ParsedArgs parsed = ParseArgs(args, {"namespace", "context", "kubeconfig"}, {"local", "wait"});
  if (!parsed.error.empty()) return UsageError(command, parsed.error, err);
  if (std::optional<int> code = RefuseNamespaceOnLocal(command, parsed, err)) return *code;
  if (parsed.positional.size() != 1)
    return UsageError(command, "name one job: kubetrain jobs cancel JOB", err);
  const std::string& name = parsed.positional[0];
  if (!UseLocalBackend(parsed.Has("local"))) {
    std::unique_ptr<ClusterJobs> cluster = ConnectOrReport(command, parsed, err);
    if (cluster == nullptr) return kExitFailed;
    absl::StatusOr<v1::TrainingJob> job = cluster->Get(name);
    if (job.ok() && core::IsTerminal(job->status().state())) {
      err << "kubetrain " << command << ": job [" << name << "] has already ended "
          << v1::State_Name(job->status().state()) << "; nothing to cancel\n";
      return kExitFailed;
    }
    absl::Status s = job.ok() ? cluster->Cancel(name) : job.status();
    if (!s.ok()) {
      err << "kubetrain " << command << ": " << s.message() << "\n";
      return kExitFailed;
    }
    out << "Cancelled job [" << name << "].\n";
    return kExitOk;
  }
  std::unique_ptr<local::JobStore> store = OpenStoreOrReport(command, err);
  if (store == nullptr) return kExitFailed;
  absl::StatusOr<v1::TrainingJob> job = store->GetJob(name);
  if (!job.ok()) {
    err << "kubetrain " << command << ": " << job.status().message() << "\n";
    return kExitFailed;
  }
  if (core::IsTerminal(job->status().state())) {
    err << "kubetrain " << command << ": job [" << name << "] has already ended "
        << v1::State_Name(job->status().state()) << "; nothing to cancel\n";
    return kExitFailed;
  }
  if (absl::Status s = store->RequestCancel(name); !s.ok()) {
    err << "kubetrain " << command << ": " << s.message() << "\n";
    return kExitFailed;
  }
  if (absl::Status s = EnsureLocalController(KubetrainHome()); !s.ok()) {
    err << "kubetrain " << command
        << ": cancel recorded, but no controller could be started to carry it out (" << s.message()
        << "); run `kubetrain local serve`\n";
    return kExitFailed;
  }
  out << "Cancelled job [" << name << "].\n";
  if (parsed.Has("wait") && *parsed.Flag("wait") == "true") {
    absl::StatusOr<v1::TrainingJob> final_job = FollowJob(*store, name, false, "", "", out);
    if (!final_job.ok()) return kExitFailed;
    out << "Job [" << name << "] is " << v1::State_Name(final_job->status().state()) << ".\n";
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> JobsCommands() {
  return {
      {{"jobs", "submit", "training"},
       "submit a training job (--config FILE, --local, --stream-logs)",
       SubmitTraining,
       "JOB [--config FILE] [--scale-tier TIER] [--module-name MODULE --package-path DIR] "
       "[--job-dir DIR] [--region REGION] [--labels KEY=VALUE,...] [--runtime-version V] "
       "[--python-version V] [--master-image-uri IMAGE] [--stream-logs | --wait | --async] "
       "[--local | -n, --namespace NS] [-- TRAINER_ARGS...]"},
      {{"jobs", "describe"},
       "show a job as YAML (--format json, --summarize)",
       Describe,
       "JOB [--format yaml|json] [--summarize] [--local | -n, --namespace NS]"},
      {{"jobs", "list"},
       "list jobs: JOB_ID STATUS CREATED (--filter, --limit)",
       List,
       "[--filter EXPRESSION] [--limit N] [--local | -n, --namespace NS]"},
      {{"jobs", "cancel"}, "cancel a job", Cancel, "JOB [--wait] [--local | -n, --namespace NS]"},
      {{"jobs", "stream-logs"},
       "follow a job's logs (--task-name, --trial)",
       StreamLogs,
       "JOB [--task-name TASK] [--trial N] [--polling-interval SECONDS] "
       "[--local | -n, --namespace NS]"},
  };
}

}  // namespace kubetrain::cli
