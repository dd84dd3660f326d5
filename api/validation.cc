#include "api/validation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/defaults.h"
#include "api/output_storage.h"
#include "api/packages.h"
#include "api/python_runtimes.h"
#include "api/roles.h"
#include "api/scale_tiers.h"
#include "api/storage_uri.h"

namespace kubetrain::api {
namespace {

using v1::HyperparameterSpec;
using v1::ParameterSpec;
using v1::TrainingInput;

// Pod and service names are "<job>-t<trial>-<role>-<index>" and must fit a
// DNS-1035 label (63 characters): "-t10000-evaluator-999" takes 21, leaving 42.
constexpr size_t kMaxJobNameLength = 40;
// Far beyond what a study needs; stops a typo from scheduling a million trials.
constexpr int kMaxTrialsLimit = 10000;
constexpr size_t kMaxDiscreteValues = 1000;
constexpr int64_t kMaxAcceleratorsPerReplica = 16;

class Validator {
 public:
  Validator(std::vector<FieldError>* errors, const ValidateOptions& options)
      : errors_(errors),
        runtimes_(options.runtimes),
        params_from_resumed_job_(options.params_from_resumed_job) {}

  void Error(std::string path, std::string reason) {
    errors_->push_back({std::move(path), std::move(reason)});
  }

  void ValidateInput(const TrainingInput& input, const std::string& path) {
    ValidateTier(input, path);
    ValidateReplicaConfig(input.master_config(), path + ".masterConfig");
    ValidateReplicaConfig(input.worker_config(), path + ".workerConfig");
    ValidateReplicaConfig(input.parameter_server_config(), path + ".parameterServerConfig");
    ValidateReplicaConfig(input.evaluator_config(), path + ".evaluatorConfig");
    for (int i = 0; i < input.args_size(); ++i) {
      if (input.args(i).empty()) Error(absl::StrCat(path, ".args[", i, "]"), "must not be empty");
    }
    ValidateStoragePaths(input, path);
    if (!input.package_uris().empty() && input.python_module().empty()) {
      Error(path + ".pythonModule", "required when packageUris is set");
    }
    if (!input.python_module().empty() && !IsPythonModuleName(input.python_module())) {
      Error(path + ".pythonModule",
            "must be a dotted Python module name such as trainer.task, got \"" +
                input.python_module() + "\"");
    }
    ValidatePythonCode(input, path);
    const auto& scheduling = input.scheduling();
    if (scheduling.has_max_running_time() && (scheduling.max_running_time().seconds() < 0 ||
                                              (scheduling.max_running_time().seconds() == 0 &&
                                               scheduling.max_running_time().nanos() <= 0))) {
      Error(path + ".scheduling.maxRunningTime", "must be positive");
    }
    if (scheduling.has_max_wait_time() &&
        (scheduling.max_wait_time().seconds() < 0 || scheduling.max_wait_time().nanos() < 0)) {
      Error(path + ".scheduling.maxWaitTime", "must not be negative");
    }
    if (input.has_hyperparameters()) {
      ValidateHyperparameters(input.hyperparameters(), input, path + ".hyperparameters");
    }
    if (input.framework() == TrainingInput::PYTORCH) ValidatePyTorch(input, path);
  }

  void ValidateSpec(const v1::TrainingJobSpec& spec) {
    ValidateInput(spec.training_input(), "spec.trainingInput");
    const auto& policy = spec.run_policy();
    if (policy.has_backoff_limit() && policy.backoff_limit() < 0) {
      Error("spec.runPolicy.backoffLimit", "must be >= 0");
    }
    if (policy.has_active_deadline_seconds() && policy.active_deadline_seconds() <= 0) {
      Error("spec.runPolicy.activeDeadlineSeconds", "must be > 0");
    }
    if (policy.has_ttl_seconds_after_finished() && policy.ttl_seconds_after_finished() < 0) {
      Error("spec.runPolicy.ttlSecondsAfterFinished", "must be >= 0");
    }
    const auto& scheduling = policy.scheduling_policy();
    if (scheduling.has_min_available() && scheduling.min_available() < 1) {
      Error("spec.runPolicy.schedulingPolicy.minAvailable", "must be >= 1");
    }
    if (scheduling.has_schedule_timeout_seconds() && scheduling.schedule_timeout_seconds() < 1) {
      Error("spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds", "must be >= 1");
    }
    if (spec.has_port() && (spec.port() < 1 || spec.port() > 65535)) {
      Error("spec.port", absl::StrCat("must be between 1 and 65535, got ", spec.port()));
    }
    if (spec.has_elastic_policy()) ValidateElastic(spec);
    if (!spec.nproc_per_node().empty()) ValidateProcessesPerNode(spec);
    for (const auto& [role, unused] : spec.replica_templates()) {
      if (!RoleFromName(role) || role == "chief") {
        Error("spec.replicaTemplates[" + role + "]",
              "unknown role; expected master, worker, ps or evaluator");
      }
    }
  }

 private:
  static bool IsPythonModuleName(const std::string& name) {
    bool at_start = true;
    for (char c : name) {
      if (c == '.') {
        if (at_start) return false;
        at_start = true;
      } else if (absl::ascii_isalpha(c) || c == '_' || (!at_start && absl::ascii_isdigit(c))) {
        at_start = false;
      } else {
        return false;
      }
    }
    return !at_start;
  }

  // jobDir and the path flags in args and containerArgs must be folders and
  // files kubetrain can reach: no object-store URIs (see api/storage_uri.h),
  // on either backend. (packageUris: ValidatePythonCode.)
  void ValidateStoragePaths(const TrainingInput& input, const std::string& path) {
    if (!UriScheme(input.job_dir()).empty()) {
      Error(path + ".jobDir", UriNotSupported(input.job_dir()) +
                                  " (on Kubernetes, spec.outputStorage mounts a claim at jobDir)");
    }
    ValidatePathFlags(input.args(), path + ".args");
    const std::pair<const v1::ReplicaConfig*, const char*> configs[] = {
        {&input.master_config(), ".masterConfig"},
        {&input.worker_config(), ".workerConfig"},
        {&input.parameter_server_config(), ".parameterServerConfig"},
        {&input.evaluator_config(), ".evaluatorConfig"}};
    for (const auto& [config, field] : configs) {
      ValidatePathFlags(config->container_args(), path + field + ".containerArgs");
    }
  }

  // "--name=value" and "--name value" of the runtime's path flags.
  void ValidatePathFlags(const google::protobuf::RepeatedPtrField<std::string>& args,
                         const std::string& path) {
    for (int i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (!absl::StartsWith(arg, "--")) continue;
      const size_t eq = arg.find('=');
      std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      for (char& c : name) c = c == '-' ? '_' : c;
      bool path_flag = false;
      for (absl::string_view flag : kPathFlags) path_flag = path_flag || flag == name;
      if (!path_flag) continue;
      int value_index = i;
      absl::string_view value;
      if (eq != std::string::npos) {
        value = absl::string_view(arg).substr(eq + 1);
      } else if (i + 1 < args.size()) {
        value_index = i + 1;
        value = args[i + 1];
      }
      if (absl::string_view uri = FirstUri(value); !uri.empty()) {
        Error(absl::StrCat(path, "[", value_index, "]"),
              absl::StrCat(arg.substr(0, eq), ": ", UriNotSupported(uri)));
      }
    }
  }

  // Where a pythonModule's code comes from (api/packages.h), and the Python
  // runtime image it runs in (api/python_runtimes.h).
  void ValidatePythonCode(const TrainingInput& input, const std::string& path) {
    for (int i = 0; i < input.package_uris_size(); ++i) {
      if (absl::StatusOr<PackageSource> source = ParsePackageUri(input.package_uris(i));
          !source.ok()) {
        Error(absl::StrCat(path, ".packageUris[", i, "]"), std::string(source.status().message()));
      }
    }
    if (runtimes_ != nullptr && !input.runtime_version().empty() &&
        runtimes_->Find(input.runtime_version(), "") == nullptr) {
      Error(path + ".runtimeVersion",
            absl::StrCat("no runtime \"", input.runtime_version(), "\" in the runtime catalog (",
                         runtimes_->source(), "); on offer: ", runtimes_->OnOffer(), "; ",
                         kRegisterRuntimeHint));
    } else if (runtimes_ != nullptr && !input.python_version().empty() &&
               runtimes_->Find(input.runtime_version(), input.python_version()) == nullptr) {
      Error(path + ".pythonVersion",
            absl::StrCat("no Python \"", input.python_version(), "\"",
                         input.runtime_version().empty()
                             ? ""
                             : absl::StrCat(" for runtimeVersion ", input.runtime_version()),
                         " in the runtime catalog (", runtimes_->source(),
                         "); on offer: ", runtimes_->OnOffer(), "; ", kRegisterRuntimeHint));
    }
    if (input.python_module().empty() || !input.package_uris().empty()) return;
    // Without a package, every replica that runs the module needs an image
    // that holds it: the Python runtime image holds no user code.
    std::vector<std::string> roles, fields;
    for (const ReplicaGroup& group : ReplicaGroups(input)) {
      if (group.config.container_command_size() > 0 || !group.config.image_uri().empty()) continue;
      roles.push_back(std::string(RoleName(group.role)));
      fields.push_back(std::string(ReplicaConfigField(group.role)) + ".imageUri");
    }
    if (roles.empty()) return;
    Error(path + ".packageUris",
          absl::StrCat("required for pythonModule ", input.python_module(), ": the ",
                       absl::StrJoin(roles, ", "),
                       roles.size() > 1 ? " replicas have" : " replica has",
                       " neither a package that holds it (packageUris, or jobs submit training "
                       "--package-path) nor an image that does (",
                       absl::StrJoin(fields, ", "), ")"));
  }

  void ValidateTier(const TrainingInput& input, const std::string& path) {
    const auto tier = input.scale_tier();
    if (tier == TrainingInput::BASIC_TPU) {
      Error(path + ".scaleTier", "BASIC_TPU is not supported: kubetrain has no TPUs");
      return;
    }
    struct Role {
      const char* type_field;
      const std::string& type;
      const char* count_field;
      bool has_count;
      int64_t count;
    };
    const Role roles[] = {
        {"workerType", input.worker_type(), "workerCount", input.has_worker_count(),
         input.worker_count()},
        {"parameterServerType", input.parameter_server_type(), "parameterServerCount",
         input.has_parameter_server_count(), input.parameter_server_count()},
        {"evaluatorType", input.evaluator_type(), "evaluatorCount", input.has_evaluator_count(),
         input.evaluator_count()},
    };
    for (const Role& role : roles) {
      const std::string count_path = path + "." + role.count_field;
      if (role.has_count && role.count < 0) {
        Error(count_path, absl::StrCat("must be >= 0, got ", role.count));
      } else if (role.has_count && role.count > kMaxReplicasPerRole) {
        Error(count_path, absl::StrCat("must be <= ", kMaxReplicasPerRole, ", got ", role.count));
      }
      ValidateMachineType(role.type, path + "." + role.type_field);
    }
    ValidateMachineType(input.master_type(), path + ".masterType");
    if (tier == TrainingInput::CUSTOM) {
      if (input.master_type().empty())
        Error(path + ".masterType", "required when scaleTier is CUSTOM");
      for (const Role& role : roles) {
        if (role.count > 0 && role.type.empty() &&
            std::string(role.count_field) != "evaluatorCount") {
          Error(path + "." + role.type_field,
                absl::StrCat("required when ", role.count_field, " is > 0"));
        }
      }
      return;
    }
    // Predefined tiers fix the cluster; only evaluators may be added.
    const std::string tier_name = TrainingInput::ScaleTier_Name(
        tier == TrainingInput::SCALE_TIER_UNSPECIFIED ? TrainingInput::BASIC : tier);
    if (!input.master_type().empty()) {
      Error(path + ".masterType",
            absl::StrCat("only valid with scaleTier CUSTOM (got ", tier_name, ")"));
    }
    for (const Role& role : roles) {
      if (std::string(role.count_field) == "evaluatorCount") continue;
      if (role.has_count) {
        Error(path + "." + role.count_field,
              absl::StrCat("only valid with scaleTier CUSTOM (got ", tier_name, ")"));
      }
      if (!role.type.empty()) {
        Error(path + "." + role.type_field,
              absl::StrCat("only valid with scaleTier CUSTOM (got ", tier_name, ")"));
      }
    }
  }

  // torch.distributed's ranks are the master and the workers: a parameter
  // server has no place in the process group. And a replica left to
  // kubetrain-runtime would train from TF_CONFIG, which PYTORCH leaves out.
  void ValidatePyTorch(const TrainingInput& input, const std::string& path) {
    for (const ReplicaGroup& group : ReplicaGroups(input)) {
      if (group.role == Role::kParameterServer) {
        const bool custom = input.scale_tier() == TrainingInput::CUSTOM;
        const std::string tier =
            custom ? "" : TrainingInput::ScaleTier_Name(input.scale_tier()) + " has ";
        Error(path + (custom ? ".parameterServerCount" : ".scaleTier"),
              absl::StrCat(tier, group.count,
                           " parameter servers; a PYTORCH job has none (its ranks are the master "
                           "and the workers): use CUSTOM without parameter servers, or framework "
                           "TENSORFLOW"));
        continue;
      }
      if (!input.python_module().empty() || group.config.container_command_size() > 0 ||
          RunsImageEntrypoint(input, group.config)) {
        continue;
      }
      const char* config = group.role == Role::kMaster   ? ".masterConfig"
                           : group.role == Role::kWorker ? ".workerConfig"
                                                         : ".evaluatorConfig";
      Error(absl::StrCat(path, config, ".containerCommand"),
            "required for a PYTORCH job without pythonModule or an image of its own (imageUri, "
            "whose entrypoint runs): kubetrain-runtime trains from TF_CONFIG, which a PYTORCH "
            "job does not get");
    }
  }

  void ValidateProcessesPerNode(const v1::TrainingJobSpec& spec) {
    if (std::string reason = api::ValidateNprocPerNode(spec.nproc_per_node()); !reason.empty()) {
      Error("spec.nprocPerNode", reason);
    } else if (spec.training_input().framework() == TrainingInput::TENSORFLOW) {
      Error("spec.nprocPerNode",
            "is torchrun's, and a TENSORFLOW job gets no PyTorch variables: "
            "use framework PYTORCH or ANY");
    }
  }

  // An elastic group is torchrun's: its nodes are the master and the
  // workers, which TF_CONFIG would list as a fixed cluster.
  void ValidateElastic(const v1::TrainingJobSpec& spec) {
    const v1::ElasticPolicy& elastic = spec.elastic_policy();
    const std::string path = "spec.elasticPolicy";
    const TrainingInput& input = spec.training_input();
    if (input.framework() != TrainingInput::PYTORCH) {
      Error(path,
            "needs spec.trainingInput.framework: PYTORCH (an elastic group is torchrun's; "
            "TF_CONFIG names a fixed set of workers)");
    }
    int64_t nodes = 0;
    for (const ReplicaGroup& group : ReplicaGroups(input)) {
      if (group.role == Role::kMaster || group.role == Role::kWorker) nodes += group.count;
    }
    const auto [low, high] = ElasticNodes(elastic, nodes);
    if (elastic.has_min_replicas() && elastic.min_replicas() < 1) {
      Error(path + ".minReplicas", absl::StrCat("must be >= 1, got ", elastic.min_replicas()));
    } else if (low > nodes) {
      Error(path + ".minReplicas",
            absl::StrCat(low, " is more than the job's ", nodes,
                         " nodes (the master and workerCount workers): the group could never "
                         "start"));
    }
    if (elastic.has_max_replicas() && high < std::max<int64_t>(low, nodes)) {
      Error(path + ".maxReplicas",
            absl::StrCat("must be at least minReplicas and the job's ", nodes,
                         " nodes (the master and workerCount workers), got ", high));
    }
    const std::string& backend = elastic.rdzv_backend();
    if (!backend.empty() && backend != "c10d" && backend != "etcd" && backend != "etcd-v2") {
      Error(path + ".rdzvBackend", "expected c10d, etcd or etcd-v2, got \"" + backend + "\"");
    } else if ((backend == "etcd" || backend == "etcd-v2") && elastic.rdzv_host().empty()) {
      Error(path + ".rdzvHost",
            "required with rdzvBackend " + backend + ": the etcd the nodes rendezvous at");
    }
    if (elastic.has_rdzv_port() && (elastic.rdzv_port() < 1 || elastic.rdzv_port() > 65535)) {
      Error(path + ".rdzvPort",
            absl::StrCat("must be between 1 and 65535, got ", elastic.rdzv_port()));
    }
    for (int i = 0; i < elastic.rdzv_conf_size(); ++i) {
      const std::string& key = elastic.rdzv_conf(i).key();
      if (key.empty() || absl::StrContains(key, "=") || absl::StrContains(key, ",") ||
          absl::StrContains(elastic.rdzv_conf(i).value(), ",")) {
        Error(absl::StrCat(path, ".rdzvConf[", i, "]"),
              "needs a key without '=' or ',' and a value without ',' (torchrun reads "
              "key=value,key=value)");
      }
    }
    if (elastic.has_max_restarts() && elastic.max_restarts() < 0) {
      Error(path + ".maxRestarts", absl::StrCat("must be >= 0, got ", elastic.max_restarts()));
    }
  }

  void ValidateMachineType(const std::string& type, const std::string& path) {
    if (type.empty() || LookupMachineType(type)) return;
    if (absl::StrContains(type, "tpu")) {
      // Cloud ML's TPU workers (cloud_tpu, standard_tpu): refused as the
      // BASIC_TPU tier is, rather than as a misspelling.
      Error(path, "TPU machine type \"" + type + "\" is not supported: kubetrain has no TPUs");
      return;
    }
    std::vector<std::string> names;
    for (const auto& machine : MachineTypes()) names.push_back(machine.machine_type);
    Error(path,
          "unknown machine type \"" + type + "\"; known types: " + absl::StrJoin(names, ", "));
  }

  void ValidateReplicaConfig(const v1::ReplicaConfig& config, const std::string& path) {
    const auto& accelerator = config.accelerator_config();
    const std::string accelerator_path = path + ".acceleratorConfig";
    if (accelerator.has_count()) {
      if (accelerator.count() < 0 || accelerator.count() > kMaxAcceleratorsPerReplica) {
        Error(accelerator_path + ".count",
              absl::StrCat("must be between 0 and ", kMaxAcceleratorsPerReplica, ", got ",
                           accelerator.count()));
      } else if (accelerator.count() > 0 &&
                 accelerator.type() == v1::AcceleratorConfig::ACCELERATOR_TYPE_UNSPECIFIED) {
        Error(accelerator_path + ".type", "required when count is > 0");
      }
    } else if (accelerator.type() != v1::AcceleratorConfig::ACCELERATOR_TYPE_UNSPECIFIED) {
      Error(accelerator_path + ".count", "required when type is set");
    }
    for (int i = 0; i < config.container_command_size(); ++i) {
      if (config.container_command(i).empty()) {
        Error(absl::StrCat(path, ".containerCommand[", i, "]"), "must not be empty");
      }
    }
  }

  void ValidateHyperparameters(const HyperparameterSpec& spec, const TrainingInput& input,
                               const std::string& path) {
    if (spec.params().empty() && spec.resume_previous_job_id().empty()) {
      Error(path + ".params", "at least one parameter is required for hyperparameter tuning");
    } else if (spec.params().empty() && !params_from_resumed_job_) {
      // The operator's study is the spec itself: what Cloud ML took from the
      // earlier study, the submission copies into it.
      Error(path + ".params",
            "at least one parameter is required for hyperparameter tuning, also when resuming "
            "job \"" +
                spec.resume_previous_job_id() +
                "\": a TrainingJob lists them (kubetrain jobs submit training copies them from "
                "the earlier job when a Cloud ML config leaves them out)");
    }
    // Cloud ML's API is proto3: a 0 there is the field left unset (the
    // default, 1), and configs that ran there say so. ApplyDefaults agrees.
    if (spec.max_trials() < 0 || spec.max_trials() > kMaxTrialsLimit) {
      Error(path + ".maxTrials", absl::StrCat("must be between 1 and ", kMaxTrialsLimit,
                                              " (0: unset, 1), got ", spec.max_trials()));
    }
    const int max_trials = EffectiveMaxTrials(spec);
    if (spec.max_parallel_trials() != 0) {
      if (spec.max_parallel_trials() < 1) {
        Error(path + ".maxParallelTrials",
              absl::StrCat("must be >= 1, got ", spec.max_parallel_trials()));
      } else if (spec.max_parallel_trials() > max_trials) {
        Error(path + ".maxParallelTrials", absl::StrCat("must be <= maxTrials (", max_trials,
                                                        "), got ", spec.max_parallel_trials()));
      }
    }
    if (spec.has_max_failed_trials() && spec.max_failed_trials() < 0) {
      Error(path + ".maxFailedTrials",
            absl::StrCat("must be >= 0, got ", spec.max_failed_trials()));
    }
    ValidateEarlyStopping(spec, path);
    if (!spec.resume_previous_job_id().empty()) {
      if (std::string reason = ValidateJobName(spec.resume_previous_job_id()); !reason.empty()) {
        Error(path + ".resumePreviousJobId", reason);
      }
    }
    std::map<std::string, int> names;
    for (int i = 0; i < spec.params_size(); ++i) {
      const std::string param_path = absl::StrCat(path, ".params[", i, "]");
      const ParameterSpec& param = spec.params(i);
      ValidateParameter(param, param_path);
      if (spec.algorithm() == HyperparameterSpec::GRID_SEARCH &&
          param.type() == ParameterSpec::DOUBLE) {
        Error(param_path + ".type",
              "GRID_SEARCH needs INTEGER, DISCRETE or CATEGORICAL parameters, got DOUBLE");
      }
      if (param.parameter_name().empty()) continue;
      auto [it, inserted] = names.emplace(param.parameter_name(), i);
      if (!inserted) {
        Error(param_path + ".parameterName",
              absl::StrCat("duplicate name \"", param.parameter_name(), "\" (also params[",
                           it->second, "])"));
      }
    }
    // The tuner appends --name=value to each trial's args; the same flag
    // already in args would be given twice with different values.
    for (int i = 0; i < input.args_size(); ++i) {
      const std::string& arg = input.args(i);
      for (const auto& [name, index] : names) {
        if (arg == "--" + name || absl::StartsWith(arg, "--" + name + "=")) {
          Error(absl::StrCat(path.substr(0, path.rfind('.')), ".args[", i, "]"),
                absl::StrCat("sets \"", name, "\", which params[", index,
                             "] tunes; remove it from args"));
        }
      }
    }
  }

  void ValidateEarlyStopping(const HyperparameterSpec& spec, const std::string& path) {
    const v1::EarlyStoppingSpec& stopping = spec.early_stopping();
    const std::string stopping_path = path + ".earlyStopping";
    if (stopping.algorithm() != v1::EarlyStoppingSpec::SUCCESSIVE_HALVING) {
      // The halving settings would be silently ignored.
      const std::string why = "only valid with algorithm SUCCESSIVE_HALVING";
      if (stopping.resource() != v1::EarlyStoppingSpec::RESOURCE_UNSPECIFIED)
        Error(stopping_path + ".resource", why);
      if (stopping.has_min_resource()) Error(stopping_path + ".minResource", why);
      if (stopping.has_reduction_factor()) Error(stopping_path + ".reductionFactor", why);
      if (stopping.pause_at_rungs()) Error(stopping_path + ".pauseAtRungs", why);
      return;
    }
    if (spec.enable_trial_early_stopping()) {
      Error(path + ".enableTrialEarlyStopping",
            "turns on the median rule, and earlyStopping.algorithm is SUCCESSIVE_HALVING: "
            "choose one");
    }
    const bool reports = stopping.resource() != v1::EarlyStoppingSpec::STEPS;
    const int64_t max_min_resource = reports ? kMaxMetricsPerTrial : INT64_MAX;
    if (stopping.has_min_resource() &&
        (stopping.min_resource() < 1 || stopping.min_resource() > max_min_resource)) {
      Error(stopping_path + ".minResource",
            reports ? absl::StrCat("must be between 1 and ", kMaxMetricsPerTrial,
                                   " reports (a trial's status keeps its last ",
                                   kMaxMetricsPerTrial, "), got ", stopping.min_resource())
                    : absl::StrCat("must be >= 1, got ", stopping.min_resource()));
    }
    if (stopping.has_reduction_factor() &&
        (stopping.reduction_factor() < 2 || stopping.reduction_factor() > 10)) {
      Error(stopping_path + ".reductionFactor",
            absl::StrCat("must be between 2 and 10, got ", stopping.reduction_factor()));
    }
    // A paused trial is not finished, so it stays in status until the study
    // ends; past this many the status would outgrow what it may hold.
    if (stopping.pause_at_rungs() && EffectiveMaxTrials(spec) > kMaxTrialsInStatus) {
      Error(stopping_path + ".pauseAtRungs",
            absl::StrCat("needs maxTrials of at most ", kMaxTrialsInStatus,
                         " (paused trials stay in status until the study ends), got ",
                         EffectiveMaxTrials(spec)));
    }
  }

  void ValidateParameter(const ParameterSpec& param, const std::string& path) {
    if (param.parameter_name().empty()) {
      Error(path + ".parameterName", "required");
    } else if (!IsFlagName(param.parameter_name())) {
      Error(path + ".parameterName",
            "must start with a letter and hold only letters, digits, '_' and '-', got \"" +
                param.parameter_name() + "\"");
    }
    const auto type = param.type();
    const bool numeric_range = type == ParameterSpec::DOUBLE || type == ParameterSpec::INTEGER;
    const std::string type_name = ParameterSpec::ParameterType_Name(type);
    if (type == ParameterSpec::PARAMETER_TYPE_UNSPECIFIED) {
      Error(path + ".type", "required: one of DOUBLE, INTEGER, CATEGORICAL, DISCRETE");
      return;
    }
    if (!numeric_range) {
      if (param.has_min_value())
        Error(path + ".minValue", "only valid for DOUBLE and INTEGER parameters");
      if (param.has_max_value())
        Error(path + ".maxValue", "only valid for DOUBLE and INTEGER parameters");
    }
    if (type != ParameterSpec::CATEGORICAL && !param.categorical_values().empty()) {
      Error(path + ".categoricalValues", "only valid for CATEGORICAL parameters, not " + type_name);
    }
    if (type != ParameterSpec::DISCRETE && !param.discrete_values().empty()) {
      Error(path + ".discreteValues", "only valid for DISCRETE parameters, not " + type_name);
    }
    if (type == ParameterSpec::CATEGORICAL && param.scale_type() != ParameterSpec::NONE) {
      Error(path + ".scaleType", "not valid for CATEGORICAL parameters");
    }
    const bool log_scale = param.scale_type() == ParameterSpec::UNIT_LOG_SCALE ||
                           param.scale_type() == ParameterSpec::UNIT_REVERSE_LOG_SCALE;
    const std::string scale_name = ParameterSpec::ScaleType_Name(param.scale_type());

    if (numeric_range) {
      if (!param.has_min_value())
        Error(path + ".minValue", "required for " + type_name + " parameters");
      if (!param.has_max_value())
        Error(path + ".maxValue", "required for " + type_name + " parameters");
      if (!param.has_min_value() || !param.has_max_value()) return;
      const double lo = param.min_value();
      const double hi = param.max_value();
      if (type == ParameterSpec::INTEGER) {
        if (lo != std::floor(lo))
          Error(path + ".minValue", "must be an integer for INTEGER parameters");
        if (hi != std::floor(hi))
          Error(path + ".maxValue", "must be an integer for INTEGER parameters");
      }
      if (lo >= hi) {
        Error(path + ".minValue", absl::StrCat("must be less than maxValue (", hi, "), got ", lo));
      }
      if (log_scale && lo <= 0) {
        Error(path + ".minValue", absl::StrCat("must be > 0 for ", scale_name, ", got ", lo));
      }
      return;
    }
    if (type == ParameterSpec::CATEGORICAL) {
      if (param.categorical_values().empty()) {
        Error(path + ".categoricalValues",
              "required: at least one value for CATEGORICAL parameters");
      }
      std::set<std::string> seen;
      for (int i = 0; i < param.categorical_values_size(); ++i) {
        const std::string& value = param.categorical_values(i);
        const std::string value_path = absl::StrCat(path, ".categoricalValues[", i, "]");
        if (value.empty()) Error(value_path, "must not be empty");
        if (!seen.insert(value).second) Error(value_path, "duplicate value \"" + value + "\"");
      }
      return;
    }
    // DISCRETE
    if (param.discrete_values().empty()) {
      Error(path + ".discreteValues", "required: at least one value for DISCRETE parameters");
    }
    if (param.discrete_values_size() > static_cast<int>(kMaxDiscreteValues)) {
      Error(path + ".discreteValues", absl::StrCat("at most ", kMaxDiscreteValues, " values, got ",
                                                   param.discrete_values_size()));
    }
    for (int i = 0; i < param.discrete_values_size(); ++i) {
      const std::string value_path = absl::StrCat(path, ".discreteValues[", i, "]");
      const double value = param.discrete_values(i);
      if (i > 0 && value <= param.discrete_values(i - 1)) {
        Error(value_path, absl::StrCat("values must be strictly increasing: ", value, " follows ",
                                       param.discrete_values(i - 1)));
      }
      if (log_scale && value <= 0) {
        Error(value_path, absl::StrCat("must be > 0 for ", scale_name, ", got ", value));
      }
    }
  }

  static bool IsFlagName(const std::string& name) {
    if (name.empty() || !absl::ascii_isalpha(name[0])) return false;
    for (char c : name) {
      if (!absl::ascii_isalnum(c) && c != '_' && c != '-') return false;
    }
    return true;
  }

  std::vector<FieldError>* errors_;
  const PythonRuntimeCatalog* runtimes_;  // null: not checked
  bool params_from_resumed_job_;
};

}  // namespace

std::string ValidateJobName(std::string_view name) {
  if (name.empty()) return "required";
  if (name.size() > kMaxJobNameLength) {
    return absl::StrCat("at most ", kMaxJobNameLength,
                        " characters (pod names derived from it must fit 63), got ", name.size());
  }
  if (!absl::ascii_isalpha(name[0])) return "must start with a letter";
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-') {
      return absl::StrCat("may hold only letters, digits, '_' and '-', found '", std::string(1, c),
                          "'");
    }
  }
  if (name.back() == '_' || name.back() == '-') return "must end with a letter or digit";
  return "";
}

std::string ValidateNamespaceName(std::string_view name) {
  const bool label = !name.empty() && name.size() <= 63 && absl::ascii_isalnum(name.front()) &&
                     absl::ascii_isalnum(name.back()) &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return (absl::ascii_isalnum(c) && !absl::ascii_isupper(c)) || c == '-';
                     });
  if (label) return "";
  return absl::StrCat(
      "a namespace is a DNS label: at most 63 lowercase letters, digits and '-', starting and "
      "ending with a letter or digit, got \"",
      std::string(name), "\"");
}

std::string ValidateNprocPerNode(std::string_view value) {
  int count = 0;
  if (value == "auto" || value == "cpu" || value == "gpu" ||
      (absl::SimpleAtoi(std::string(value), &count) && count >= 1 && count <= 1024 &&
       std::to_string(count) == value)) {
    return "";
  }
  return absl::StrCat("expected a number of processes (1 to 1024), auto, gpu or cpu, got \"",
                      std::string(value), "\"");
}

std::string KubernetesName(std::string_view job_name) {
  std::string out(job_name);
  for (char& c : out) {
    c = c == '_' ? '-' : absl::ascii_tolower(c);
  }
  return out;
}

std::vector<FieldError> Validate(const v1::TrainingJob& job, const ValidateOptions& options) {
  std::vector<FieldError> errors;
  Validator validator(&errors, options);
  if (!job.api_version().empty() && job.api_version() != kApiVersion) {
    validator.Error("apiVersion",
                    absl::StrCat("must be ", kApiVersion, ", got \"", job.api_version(), "\""));
  }
  if (!job.kind().empty() && job.kind() != kKind) {
    validator.Error("kind", absl::StrCat("must be ", kKind, ", got \"", job.kind(), "\""));
  }
  const std::string& generate_name = job.metadata().generate_name();
  if (job.metadata().name().empty() && !generate_name.empty()) {
    // The API server appends five characters of [a-z0-9] to the prefix.
    if (std::string reason = ValidateJobName(generate_name + "x0000"); !reason.empty()) {
      validator.Error("metadata.generateName", reason +
                                                   " (with the 5 characters the API "
                                                   "server appends)");
    }
  } else if (options.require_name || !job.metadata().name().empty()) {
    if (std::string reason = ValidateJobName(job.metadata().name()); !reason.empty()) {
      validator.Error("metadata.name", reason);
    }
  }
  if (const std::string& ns = job.metadata().namespace_(); !ns.empty()) {
    if (std::string reason = ValidateNamespaceName(ns); !reason.empty()) {
      validator.Error("metadata.namespace", reason);
    }
  }
  validator.ValidateSpec(job.spec());
  ValidateOutputStorage(job.spec(), &errors);
  if (options.bare_config) {
    for (FieldError& error : errors) {
      if (absl::StartsWith(error.path, "spec.")) error.path = error.path.substr(5);
    }
  }
  return errors;
}

}  // namespace kubetrain::api
