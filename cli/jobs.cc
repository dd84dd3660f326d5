// `kubetrain jobs submit training | describe | list | cancel | stream-logs`,
// shaped like `gcloud ai-platform jobs …`, on the local backend or a cluster
// (jobs_backend.h).
#include <algorithm>
#include <memory>
#include <optional>
#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "api/job_file.h"
#include "api/validation.h"
#include "cli/commands.h"
#include "cli/jobs_backend.h"
#include "cli/jobs_format.h"
#include "cli/local_backend.h"
#include "operator/core/reconciler.h"

namespace kubetrain::cli {
namespace {

int UsageError(const std::string& command, const std::string& message, std::ostream& err) {
  err << "kubetrain " << command << ": " << message << "\n";
  return kExitUsage;
}

int Failed(const std::string& command, const absl::Status& status, std::ostream& err) {
  err << "kubetrain " << command << ": " << status.message() << "\n";
  return kExitFailed;
}

// Local jobs have no namespace: -n/--namespace with the local backend is
// refused rather than ignored.
std::optional<int> RefuseNamespaceOnLocal(const std::string& command, const ParsedArgs& parsed,
                                          std::ostream& err) {
  if (!parsed.Has("namespace") || !UseLocalBackend(parsed)) return std::nullopt;
  return UsageError(command,
                    "-n/--namespace names a Kubernetes namespace; the local backend (--local or "
                    "KUBETRAIN_BACKEND=local) has none",
                    err);
}

// The backend that --local, $KUBETRAIN_BACKEND and kubectl's flags choose,
// not yet opened.
std::unique_ptr<JobsBackend> ChooseBackend(const ParsedArgs& parsed) {
  if (UseLocalBackend(parsed)) return LocalJobsBackend();
  ClusterTarget target;
  if (const std::string* ns = parsed.Flag("namespace")) target.namespace_name = *ns;
  if (const std::string* context = parsed.Flag("context")) target.context = *context;
  if (const std::string* kubeconfig = parsed.Flag("kubeconfig")) target.kubeconfig = *kubeconfig;
  return ClusterJobsBackend(target);
}

// The chosen backend, opened; nullptr after printing why it could not be.
std::unique_ptr<JobsBackend> OpenBackend(const std::string& command, const ParsedArgs& parsed,
                                         std::ostream& err) {
  std::unique_ptr<JobsBackend> backend = ChooseBackend(parsed);
  if (absl::Status s = backend->Open(); !s.ok()) {
    Failed(command, s, err);
    return nullptr;
  }
  return backend;
}

// A command shows a job that has not ended: warns when nothing will move it on.
void KeepMoving(JobsBackend& backend, const std::string& command, std::ostream& err) {
  if (absl::Status s = backend.KeepUnfinishedJobsMoving(); !s.ok()) {
    err << "kubetrain " << command << ": warning: " << s.message() << "\n";
  }
}

// ---- the flags of each command, which ParseArgs reads and --help lists

std::vector<FlagSpec> WithBackendFlags(std::vector<FlagSpec> flags) {
  for (FlagSpec& flag : BackendFlags()) flags.push_back(std::move(flag));
  return flags;
}

std::vector<FlagSpec> StreamLogsFlags() {
  return WithBackendFlags({
      {"task-name", "TASK", "only this replica's lines (master-replica-0, worker-replica-1, ...)"},
      {"trial", "N", "only this trial's lines"},
      {"polling-interval", "SECONDS",
       "whole seconds between polls (default: 0.3 s on the local backend; on a cluster 1 s for "
       "logs, 2 s for the job's state)"},
      {"allow-multiline-logs", "",
       "gcloud's; accepted, and each line is printed as the replica wrote it"},
  });
}

std::vector<FlagSpec> SubmitFlags() {
  return WithBackendFlags({
      {"config", "FILE",
       "a Cloud ML config.yaml, a TrainingJob, or a Kubeflow TFJob or PyTorchJob; the flags below "
       "override it"},
      {"scale-tier", "TIER",
       "BASIC, STANDARD_1, PREMIUM_1, BASIC_GPU or CUSTOM (or basic-gpu, ...)"},
      {"module-name", "MODULE", "the Python module the replicas run (python3 -m MODULE)"},
      {"package-path", "DIR", "the folder of the trainer package, shipped with the job"},
      {"job-dir", "DIR", "where the job writes its outputs; the trainer is given --job-dir DIR"},
      {"region", "REGION", "recorded in the job; the job runs where the cluster is"},
      {"labels", "KEY=VALUE,...", "the job's labels; may be repeated"},
      {"runtime-version", "V",
       "the runtime whose image runs a --module-name package (default: the newest)"},
      {"python-version", "V", "the runtime's Python (default: its first)"},
      {kRuntimeCatalogFlag, "FILE",
       "check runtimeVersion/pythonVersion against this catalog (default: the local backend's; "
       "on a cluster, its operator checks them against the cluster's)"},
      {"master-image-uri", "IMAGE", "the master's container image"},
      {"stream-logs", "", "follow the job's logs until it ends; the exit code says how it ended"},
      {"wait", "", "wait for the job to end, printing its progress; the exit code says how"},
      {"async", "", "return once the job is submitted (the default)"},
  });
}

std::vector<FlagSpec> DescribeFlags() {
  return WithBackendFlags({
      {"format", "FORMAT", "yaml (the default) or json"},
      {"summarize", "", "tables: overview, input, output and trials"},
  });
}

std::vector<FlagSpec> ListFlags() {
  return WithBackendFlags({
      {"filter", "EXPRESSION",
       "terms that must all hold: state=S, jobId=NAME, jobId:TEXT, labels.KEY=VALUE"},
      {"limit", "N", "at most N jobs"},
      {"page-size", "N", "gcloud's; accepted, and the list is printed whole"},
      {"sort-by", "FIELD", "gcloud's; accepted, and the list keeps its order"},
  });
}

std::vector<FlagSpec> CancelFlags() {
  return WithBackendFlags({{"wait", "", "wait until the job has ended, printing its progress"}});
}

// ---- stream-logs

int StreamLogs(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs stream-logs";
  ParsedArgs parsed = ParseArgs(args, StreamLogsFlags());
  if (!parsed.error.empty()) return UsageError(command, parsed.error, err);
  if (std::optional<int> code = RefuseNamespaceOnLocal(command, parsed, err)) return *code;
  if (parsed.positional.size() != 1)
    return UsageError(command, "name one job: kubetrain jobs stream-logs JOB", err);
  FollowOptions options;
  options.logs = true;
  if (const std::string* task = parsed.Flag("task-name")) options.task_filter = *task;
  if (const std::string* trial = parsed.Flag("trial")) options.trial_filter = *trial;
  if (const std::string* text = parsed.Flag("polling-interval")) {
    int seconds = 0;
    if (!absl::SimpleAtoi(*text, &seconds) || seconds < 1) {
      return UsageError(command, "--polling-interval: whole seconds >= 1, got \"" + *text + "\"",
                        err);
    }
    options.poll_interval = absl::Seconds(seconds);
  }
  std::unique_ptr<JobsBackend> backend = OpenBackend(command, parsed, err);
  if (backend == nullptr) return kExitFailed;
  absl::StatusOr<v1::TrainingJob> job = backend->Follow(parsed.positional[0], options, out);
  if (!job.ok()) return Failed(command, job.status(), err);
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

int SubmitTraining(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs submit training";
  ParsedArgs parsed = ParseArgs(args, SubmitFlags());
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
  std::unique_ptr<JobsBackend> backend = ChooseBackend(parsed);
  // The runtimes the job may name: where it runs. A cluster's catalog is its
  // operator's, which checks the job there, unless --runtime-catalog names one.
  std::optional<api::PythonRuntimeCatalog> runtimes;
  if (UseLocalBackend(parsed) || parsed.Has(kRuntimeCatalogFlag)) {
    absl::StatusOr<api::PythonRuntimeCatalog> loaded = CommandRuntimeCatalog(parsed);
    if (!loaded.ok()) return UsageError(command, std::string(loaded.status().message()), err);
    runtimes = *std::move(loaded);
  }
  const api::PythonRuntimeCatalog* checked_runtimes = runtimes ? &*runtimes : nullptr;

  v1::TrainingJob job;
  bool bare_config = true;
  std::string source = "command line";
  if (const std::string* config = parsed.Flag("config")) {
    source = *config;
    absl::StatusOr<std::string> text = api::ReadTextFile(*config);
    if (!text.ok()) return UsageError(command, std::string(text.status().message()), err);
    api::CheckedJob checked =
        api::CheckTrainingJob(*text, /*require_name=*/false, checked_runtimes);
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
  if (const std::string* package = parsed.Flag("package-path")) {
    absl::StatusOr<std::string> search_path = PackageSearchPath(
        *package, input->python_module().empty() ? nullptr : &input->python_module());
    if (!search_path.ok())
      return UsageError(command, std::string(search_path.status().message()), err);
    if (absl::Status s = backend->AttachPackage({*package, *search_path}, job); !s.ok()) {
      return absl::IsInvalidArgument(s) ? UsageError(command, std::string(s.message()), err)
                                        : Failed(command, s, err);
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
  bool opened = false;
  if (api::LeavesParamsToResumedJob(job)) {
    // Cloud ML went on with the earlier study's params; the TrainingJob,
    // which is the operator's whole study, gets a copy of them.
    if (absl::Status s = backend->Open(); !s.ok()) return Failed(command, s, err);
    opened = true;
    const std::string& earlier_id = input->hyperparameters().resume_previous_job_id();
    absl::StatusOr<v1::TrainingJob> earlier = backend->Get(earlier_id);
    absl::Status taken =
        earlier.ok() ? api::TakeResumedStudyParams(*earlier, &job) : earlier.status();
    if (absl::IsNotFound(taken) || absl::IsInvalidArgument(taken)) {
      err << source << ": " << (bare_config ? "" : "spec.")
          << "trainingInput.hyperparameters.resumePreviousJobId: " << taken.message()
          << "; a study without params of its own takes them from that job\n";
      err << "kubetrain " << command << ": the job is not valid; nothing was submitted\n";
      return kExitUsage;
    }
    if (!taken.ok()) return Failed(command, taken, err);
    out << "Job [" << name << "] goes on with the study of job [" << earlier_id
        << "]: its params, goal and hyperparameterMetricTag are that job's\n";
  }
  std::vector<api::FieldError> errors = api::Validate(
      job, {.require_name = true, .bare_config = false, .runtimes = checked_runtimes});
  if (!errors.empty()) {
    err << api::FormatErrors(errors, source);
    err << "kubetrain " << command << ": the job is not valid; nothing was submitted\n";
    return kExitUsage;
  }
  const bool stream = parsed.Switch("stream-logs");
  const bool wait = parsed.Switch("wait");
  if (!opened) {
    if (absl::Status s = backend->Open(); !s.ok()) return Failed(command, s, err);
  }
  if (absl::Status s = backend->Submit(job, stream, out); !s.ok()) return Failed(command, s, err);
  if (!stream && !wait) return kExitOk;
  FollowOptions follow;
  follow.logs = stream;
  follow.progress = true;
  absl::StatusOr<v1::TrainingJob> final_job = backend->Follow(name, follow, out);
  if (!final_job.ok()) return Failed(command, final_job.status(), err);
  return PrintFinal(*final_job, command, out, err);
}

// ---- describe, list, cancel

int Describe(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs describe";
  ParsedArgs parsed = ParseArgs(args, DescribeFlags());
  if (!parsed.error.empty()) return UsageError(command, parsed.error, err);
  if (std::optional<int> code = RefuseNamespaceOnLocal(command, parsed, err)) return *code;
  if (parsed.positional.size() != 1)
    return UsageError(command, "name one job: kubetrain jobs describe JOB", err);
  const std::string format = parsed.Flag("format") ? *parsed.Flag("format") : "yaml";
  if (format != "yaml" && format != "json") {
    return UsageError(command, "--format: yaml or json, got \"" + format + "\"", err);
  }
  std::unique_ptr<JobsBackend> backend = OpenBackend(command, parsed, err);
  if (backend == nullptr) return kExitFailed;
  absl::StatusOr<v1::TrainingJob> job = backend->Get(parsed.positional[0]);
  if (!job.ok()) return Failed(command, job.status(), err);
  if (!core::IsTerminal(job->status().state())) KeepMoving(*backend, command, err);
  // Trials past the first 100 are archived out of the status (on a cluster
  // as ConfigMaps of the job: without the right to list those, the status
  // alone is shown).
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> archived = backend->ArchivedTrials(*job);
  nlohmann::json resource =
      JobResource(*job, archived.ok() ? *archived : std::vector<v1::HyperparameterOutput>{});
  // On a cluster, the job's recent Events follow, as `kubectl describe` ends.
  std::optional<absl::StatusOr<std::vector<JobEvent>>> events = backend->Events(*job);
  const bool summarize = parsed.Switch("summarize");
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
  ParsedArgs parsed = ParseArgs(args, ListFlags());
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
  std::unique_ptr<JobsBackend> backend = OpenBackend(command, parsed, err);
  if (backend == nullptr) return kExitFailed;
  absl::StatusOr<std::vector<v1::TrainingJob>> jobs = backend->List();
  if (!jobs.ok()) return Failed(command, jobs.status(), err);
  if (std::any_of(jobs->begin(), jobs->end(), [](const v1::TrainingJob& job) {
        return !core::IsTerminal(job.status().state());
      })) {
    KeepMoving(*backend, command, err);
  }
  // gcloud's three columns; a fourth, QUEUE, while gang admission holds a
  // listed job (its place in the queue, docs/admission.md).
  std::vector<std::vector<std::string>> rows = {{"JOB_ID", "STATUS", "CREATED", "QUEUE"}};
  bool queued = false;
  for (auto it = jobs->rbegin(); it != jobs->rend(); ++it) {  // newest first, as gcloud
    if (!keep(*it)) continue;
    if (limit >= 0 && static_cast<int64_t>(rows.size()) > limit) break;
    nlohmann::json resource = JobResource(*it);
    const int32_t position = it->status().queue_position();
    queued = queued || position > 0;
    rows.push_back({it->metadata().name(), resource["state"].get<std::string>(),
                    resource.value("createTime", std::string()),
                    position > 0 ? std::to_string(position) : ""});
  }
  if (rows.size() == 1) {
    err << "Listed 0 items.\n";
    return kExitOk;
  }
  const size_t columns = queued ? 4 : 3;
  std::vector<size_t> widths(columns, 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < columns; ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < columns; ++i) {
      line += row[i];
      if (i + 1 < columns) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out << absl::StripTrailingAsciiWhitespace(line) << "\n";
  }
  return kExitOk;
}

int Cancel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string command = "jobs cancel";
  ParsedArgs parsed = ParseArgs(args, CancelFlags());
  if (!parsed.error.empty()) return UsageError(command, parsed.error, err);
  if (std::optional<int> code = RefuseNamespaceOnLocal(command, parsed, err)) return *code;
  if (parsed.positional.size() != 1)
    return UsageError(command, "name one job: kubetrain jobs cancel JOB", err);
  const std::string& name = parsed.positional[0];
  std::unique_ptr<JobsBackend> backend = OpenBackend(command, parsed, err);
  if (backend == nullptr) return kExitFailed;
  absl::StatusOr<v1::TrainingJob> job = backend->Get(name);
  if (!job.ok()) return Failed(command, job.status(), err);
  if (core::IsTerminal(job->status().state())) {
    err << "kubetrain " << command << ": job [" << name << "] has already ended "
        << v1::State_Name(job->status().state()) << "; nothing to cancel\n";
    return kExitFailed;
  }
  if (absl::Status s = backend->Cancel(name); !s.ok()) return Failed(command, s, err);
  out << "Cancelled job [" << name << "].\n";
  if (parsed.Switch("wait")) {
    FollowOptions follow;
    follow.progress = true;
    absl::StatusOr<v1::TrainingJob> final_job = backend->Follow(name, follow, out);
    if (!final_job.ok()) return Failed(command, final_job.status(), err);
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
       "[--local | -n, --namespace NS] [-- TRAINER_ARGS...]",
       SubmitFlags()},
      {{"jobs", "describe"},
       "show a job as YAML (--format json, --summarize)",
       Describe,
       "JOB [--format yaml|json] [--summarize] [--local | -n, --namespace NS]",
       DescribeFlags()},
      {{"jobs", "list"},
       "list jobs: JOB_ID STATUS CREATED (--filter, --limit)",
       List,
       "[--filter EXPRESSION] [--limit N] [--local | -n, --namespace NS]",
       ListFlags()},
      {{"jobs", "cancel"},
       "cancel a job",
       Cancel,
       "JOB [--wait] [--local | -n, --namespace NS]",
       CancelFlags()},
      {{"jobs", "stream-logs"},
       "follow a job's logs (--task-name, --trial)",
       StreamLogs,
       "JOB [--task-name TASK] [--trial N] [--polling-interval SECONDS] "
       "[--local | -n, --namespace NS]",
       StreamLogsFlags()},
  };
}

}  // namespace kubetrain::cli
