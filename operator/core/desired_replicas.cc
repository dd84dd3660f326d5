#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "api/defaults.h"
#include "operator/core/python_module.h"
#include "operator/core/pytorch_env.h"
#include "operator/core/reconcile_pass.h"
#include "operator/core/reconciler.h"

// The replicas a job asks for: names, command and args, resources and the
// environment of every replica, and the port the job's tasks listen on.

namespace kubetrain::core {
namespace internal {
namespace {

std::string JoinPath(const std::string& dir, const std::string& leaf) {
  if (dir.empty()) return leaf;
  if (dir.back() == '/') return dir + leaf;
  return dir + "/" + leaf;
}

std::vector<std::string> ReplicaArgs(const v1::TrainingJob& job, const api::ReplicaGroup& group,
                                     const std::string& trial_id,
                                     const tuner::Assignment& hyperparameters) {
  const v1::TrainingInput& input = job.spec().training_input();
  std::vector<std::string> args;
  if (group.config.container_args_size() > 0) {
    args.assign(group.config.container_args().begin(), group.config.container_args().end());
  } else {
    args.assign(input.args().begin(), input.args().end());
  }
  if (!trial_id.empty()) {
    // The spec's parameter order, so the command line reads as the spec does.
    for (const v1::ParameterSpec& param : input.hyperparameters().params()) {
      auto it = hyperparameters.find(param.parameter_name());
      if (it != hyperparameters.end()) {
        args.push_back("--" + param.parameter_name() + "=" + it->second);
      }
    }
    // A trainer told --output_path=X writes the trial to X/<trial> (the
    // later flag wins in argparse and absl flags alike).
    std::optional<std::string> output_path;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].rfind("--output_path=", 0) == 0) {
        output_path = args[i].substr(14);
      } else if (args[i] == "--output_path" && i + 1 < args.size()) {
        output_path = args[i + 1];
      }
    }
    if (output_path) args.push_back("--output_path=" + JoinPath(*output_path, trial_id));
  }
  if (!input.job_dir().empty()) {
    args.push_back("--job-dir");
    args.push_back(trial_id.empty() ? input.job_dir() : JoinPath(input.job_dir(), trial_id));
  }
  return args;
}

// Whose reports count (as with `train` and `exec`): the chief.
bool IsChief(const std::vector<api::ReplicaGroup>& groups, const api::ReplicaGroup& group,
             int64_t index) {
  return index == 0 && group.role == api::ChiefRole(groups);
}

// The trainer writes the hypertune file, the sidecar reports it with the
// trial's identity and token (moved off the trainer's container: an image
// of the user's has no use for them).
void AddMetricsSidecar(DesiredReplica& r, const ReconcileOptions& options) {
  DesiredReplica::MetricsSidecar sidecar;
  sidecar.image = options.default_image;
  sidecar.metric_file = std::string(kMetricsSidecarFolder) + "/output.metrics";
  std::vector<std::pair<std::string, std::string>> trainer;
  for (auto& [name, value] : r.env) {
    const bool reporting = name == "KUBETRAIN_METRICS_ADDR" || name == "KUBETRAIN_METRICS_TOKEN";
    const bool identity = absl::StartsWith(name, "KUBETRAIN_") || name == "CLOUD_ML_TRIAL_ID";
    if (reporting || identity) sidecar.env.emplace_back(name, value);
    if (!reporting) trainer.emplace_back(std::move(name), std::move(value));
  }
  trainer.emplace_back("CLOUD_ML_HP_METRIC_FILE", sidecar.metric_file);
  r.env = std::move(trainer);
  r.metrics_sidecar = std::move(sidecar);
}

}  // namespace

DesiredReplica MakeReplica(const v1::TrainingJob& job, const std::vector<api::ReplicaGroup>& groups,
                           const api::ReplicaGroup& group, int64_t index,
                           const std::string& trial_id, const tuner::Assignment& hyperparameters,
                           const ReconcileOptions& options) {
  const v1::TrainingInput& input = job.spec().training_input();
  const std::string job_name = JobObjectName(job);
  DesiredReplica r;
  r.key = ReplicaKey{trial_id, group.role, index};
  const bool use_chief = input.use_chief_in_tf_config();
  r.name = ReplicaName(job_name, r.key, use_chief);
  r.labels = ReplicaLabels(job_name, r.key, use_chief);
  r.port = job.spec().has_port() ? job.spec().port() : api::kDefaultPort;
  r.image = group.config.image_uri().empty() ? options.default_image : group.config.image_uri();
  if (group.config.image_uri().empty()) {
    r.image_pull_policy = "IfNotPresent";
    r.image_runs_as_non_root = true;
  }
  if (group.config.container_command_size() > 0) {
    r.command.assign(group.config.container_command().begin(),
                     group.config.container_command().end());
  } else if (RunsPythonModule(input, group.config)) {
    PythonModuleRun run = PlanPythonModule(input, Runtimes(options));
    r.command = std::move(run.command);
    r.package_mounts = std::move(run.mounts);
    r.python_module = input.python_module();
    r.python = std::move(run.python);
    if (group.config.image_uri().empty()) r.image = std::move(run.image);
  } else if (api::RunsImageEntrypoint(input, group.config)) {
    // No command: the image's ENTRYPOINT runs, with the args (an image of
    // the user's has no kubetrain-runtime to run).
  } else {
    r.command = {"kubetrain-runtime", "train"};
  }
  r.args = ReplicaArgs(job, group, trial_id, hyperparameters);
  r.resources.machine_type = group.resources.machine_type;
  r.resources.cpu = group.resources.cpu;
  r.resources.memory_mib = group.resources.memory_mib;
  r.resources.gpus = group.resources.gpus;
  if (group.config.accelerator_config().has_count()) {
    r.resources.gpus = group.config.accelerator_config().count();
  }
  if (r.resources.gpus > 0 && group.config.accelerator_config().type() !=
                                  v1::AcceleratorConfig::ACCELERATOR_TYPE_UNSPECIFIED) {
    r.resources.accelerator_type =
        v1::AcceleratorConfig::AcceleratorType_Name(group.config.accelerator_config().type());
  }
  const v1::RunPolicy::RestartPolicy policy = job.spec().run_policy().restart_policy();
  r.restart_policy = (policy == v1::RunPolicy::OnFailure || policy == v1::RunPolicy::Always)
                         ? ContainerRestartPolicy::kOnFailure
                         : ContainerRestartPolicy::kNever;

  AddressFn address = options.address ? options.address
                                      : KubernetesAddresses(job.metadata().namespace_().empty()
                                                                ? "default"
                                                                : job.metadata().namespace_());
  if (WantsTfConfig(input)) {
    r.env.emplace_back("TF_CONFIG", BuildTfConfig(job, groups, r.key, address));
  }
  if (WantsPyTorchEnv(input)) {
    for (auto& entry : BuildPyTorchEnv(job, groups, r.key, address)) {
      r.env.push_back(std::move(entry));
    }
  }
  r.env.emplace_back("CLOUD_ML_JOB_ID", job.metadata().name());
  if (!trial_id.empty()) r.env.emplace_back("CLOUD_ML_TRIAL_ID", trial_id);
  r.env.emplace_back("KUBETRAIN_JOB_NAME", job.metadata().name());
  r.env.emplace_back("KUBETRAIN_NAMESPACE", job.metadata().namespace_());
  r.env.emplace_back("KUBETRAIN_JOB_UID", job.metadata().uid());
  r.env.emplace_back("KUBETRAIN_TASK_TYPE", ReplicaRoleName(group.role, use_chief));
  r.env.emplace_back("KUBETRAIN_TASK_INDEX", std::to_string(index));
  if (!trial_id.empty()) r.env.emplace_back("KUBETRAIN_TRIAL_ID", trial_id);
  if (IsStudy(job)) {
    r.env.emplace_back("KUBETRAIN_METRIC_TAG", input.hyperparameters().hyperparameter_metric_tag());
  }
  // Only a trial has metrics to report (its objective).
  if (!trial_id.empty() && !options.metrics_address.empty()) {
    r.env.emplace_back("KUBETRAIN_METRICS_ADDR", options.metrics_address);
  }
  if (!trial_id.empty() && options.trial_token) {
    r.env.emplace_back("KUBETRAIN_METRICS_TOKEN",
                       options.trial_token(job.metadata().uid(), trial_id));
  }
  if (!trial_id.empty() && !options.metrics_address.empty() &&
      api::RunsImageEntrypoint(input, group.config) && IsChief(groups, group, index)) {
    AddMetricsSidecar(r, options);
  }
  return r;
}

std::vector<DesiredReplica> MakeReplicas(const v1::TrainingJob& job,
                                         const std::vector<api::ReplicaGroup>& groups,
                                         const std::string& trial_id,
                                         const tuner::Assignment& hyperparameters,
                                         const ReconcileOptions& options) {
  std::vector<DesiredReplica> replicas;
  for (const api::ReplicaGroup& group : groups) {
    for (int64_t i = 0; i < group.count; ++i) {
      replicas.push_back(MakeReplica(job, groups, group, i, trial_id, hyperparameters, options));
    }
  }
  return replicas;
}

}  // namespace internal

std::optional<int> TemplatePort(const v1::TrainingJob& job) {
  if (!job.spec().has_template_()) return std::nullopt;
  const auto& fields = job.spec().template_().fields();
  auto spec = fields.find("spec");
  if (spec == fields.end() || !spec->second.has_struct_value()) return std::nullopt;
  auto containers = spec->second.struct_value().fields().find("containers");
  if (containers == spec->second.struct_value().fields().end() ||
      !containers->second.has_list_value()) {
    return std::nullopt;
  }
  for (const google::protobuf::Value& container : containers->second.list_value().values()) {
    if (!container.has_struct_value()) continue;
    const auto& c = container.struct_value().fields();
    // The training container: named "kubetrain", or unnamed (kube_objects.h).
    if (auto name = c.find("name");
        name != c.end() &&
        !(name->second.has_string_value() && name->second.string_value() == "kubetrain")) {
      continue;
    }
    auto ports = c.find("ports");
    if (ports == c.end() || !ports->second.has_list_value() ||
        ports->second.list_value().values_size() == 0) {
      continue;
    }
    const google::protobuf::Value& first = ports->second.list_value().values(0);
    if (!first.has_struct_value()) continue;
    auto port = first.struct_value().fields().find("containerPort");
    if (port == first.struct_value().fields().end() || !port->second.has_number_value()) continue;
    const double value = port->second.number_value();
    if (value >= 1 && value <= 65535 && value == std::floor(value)) return static_cast<int>(value);
  }
  return std::nullopt;
}

v1::TrainingJob Normalize(const v1::TrainingJob& job) {
  v1::TrainingJob normalized = job;
  if (!normalized.spec().has_port()) {
    if (std::optional<int> port = TemplatePort(job)) normalized.mutable_spec()->set_port(*port);
  }
  api::ApplyDefaults(&normalized);
  return normalized;
}

std::vector<DesiredReplica> DesiredReplicas(const v1::TrainingJob& job, const std::string& trial_id,
                                            const tuner::Assignment& hyperparameters,
                                            const ReconcileOptions& options) {
  const v1::TrainingJob defaulted = Normalize(job);
  const std::vector<api::ReplicaGroup> groups =
      api::ReplicaGroups(defaulted.spec().training_input());
  return internal::MakeReplicas(defaulted, groups, trial_id, hyperparameters, options);
}

}  // namespace kubetrain::core
