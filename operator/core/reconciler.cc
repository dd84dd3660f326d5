#include "operator/core/reconciler.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <set>
#include <utility>

#include "api/defaults.h"
#include "api/field_error.h"
#include "api/scale_tiers.h"
#include "api/validation.h"
#include "google/protobuf/util/message_differencer.h"
#include "operator/core/output_storage.h"
#include "operator/core/python_module.h"
#include "operator/core/pytorch_env.h"
#include "operator/tuner/search_space.h"

namespace kubetrain::core {
namespace {

using api::Role;

// Condition types.
constexpr char kCreated[] = "Created";
constexpr char kRunning[] = "Running";
constexpr char kRestarting[] = "Restarting";
constexpr char kSucceeded[] = "Succeeded";
constexpr char kFailed[] = "Failed";
constexpr char kCancelled[] = "Cancelled";
constexpr char kSuspended[] = "Suspended";
constexpr char kOutputsEphemeral[] = "OutputsEphemeral";

// Termination messages are the user's; keep status small.
constexpr size_t kMaxMessageLength = 1024;

absl::Time FromProto(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

void ToProto(absl::Time t, google::protobuf::Timestamp* ts) {
  const int64_t seconds = absl::ToUnixSeconds(t);
  ts->set_seconds(seconds);
  ts->set_nanos(static_cast<int32_t>((t - absl::FromUnixSeconds(seconds)) / absl::Nanoseconds(1)));
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

std::string Truncate(std::string text) {
  if (text.size() > kMaxMessageLength) {
    text.resize(kMaxMessageLength);
    text += "...";
  }
  return text;
}

std::string DurationText(absl::Duration d) { return absl::FormatDuration(d); }

// An objective as the trainer reported it: the shortest text that reads back
// as the same double ("0.8804", not std::to_string's "0.880400").
std::string ObjectiveText(double value) {
  char text[64];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, end.ptr);
}

bool IsStudy(const v1::TrainingJob& job) {
  return job.spec().training_input().hyperparameters().params_size() > 0;
}

// ---- Conditions --------------------------------------------------------

v1::Condition* FindCondition(v1::TrainingJobStatus* status, const std::string& type) {
  for (v1::Condition& c : *status->mutable_conditions()) {
    if (c.type() == type) return &c;
  }
  return nullptr;
}

bool ConditionIsTrue(const v1::TrainingJobStatus& status, const std::string& type) {
  for (const v1::Condition& c : status.conditions()) {
    if (c.type() == type) return c.status() == "True";
  }
  return false;
}

// Sets a condition; returns true when it became true just now. A condition
// that never existed is not added as "False": absent reads as false.
bool SetCondition(v1::TrainingJobStatus* status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, absl::Time now) {
  const std::string value_text = value ? "True" : "False";
  v1::Condition* c = FindCondition(status, type);
  if (c == nullptr) {
    if (!value) return false;
    c = status->add_conditions();
    c->set_type(type);
  } else if (c->status() == value_text && c->reason() == reason && c->message() == message) {
    return false;
  }
  const bool transition = c->status() != value_text;
  c->set_status(value_text);
  c->set_reason(reason);
  c->set_message(message);
  ToProto(now, c->mutable_last_update_time());
  if (transition) ToProto(now, c->mutable_last_transition_time());
  return transition && value;
}

// ---- Describing replicas -------------------------------------------------

bool IsLost(const ObservedReplica& r) { return r.phase == ReplicaPhase::kUnknown || r.node_lost; }

std::string DescribeFailure(const ObservedReplica& r, bool use_chief) {
  const std::string task = TaskName(r.key, use_chief);
  std::string text;
  if (r.node_lost) {
    text = task + " was lost: its node is unreachable";
  } else if (r.phase == ReplicaPhase::kUnknown) {
    text = task + " is in phase Unknown: its node is unreachable";
  } else if (r.exit_code.has_value()) {
    text = task + " exited with code " + std::to_string(*r.exit_code);
    if (!r.reason.empty() && r.reason != "Error") text += " (" + r.reason + ")";
  } else {
    text = task + " failed: " + (r.reason.empty() ? std::string("pod failed") : r.reason);
  }
  if (!r.termination_message.empty()) text += ": " + r.termination_message;
  return Truncate(text);
}

// ---- The reconcile context ---------------------------------------------

struct Context {
  const v1::TrainingJob& stored;
  const Observed& observed;
  absl::Time now;
  const ReconcileOptions& options;

  v1::TrainingJob job;  // defaulted copy
  std::vector<api::ReplicaGroup> groups;
  std::string job_name;
  ReconcileResult result;

  v1::TrainingJobStatus& status() { return result.status; }

  void Emit(EmitEvent::Type type, std::string reason, std::string message) {
    result.actions.push_back(EmitEvent{type, std::move(reason), Truncate(std::move(message))});
  }
  void RequeueAt(absl::Time t) {
    absl::Duration after = std::max(t - now, absl::Seconds(1));
    if (!result.requeue_after || after < *result.requeue_after) result.requeue_after = after;
  }
  const v1::RunPolicy& policy() const { return job.spec().run_policy(); }
  bool use_chief() const { return job.spec().training_input().use_chief_in_tf_config(); }
  const v1::HyperparameterSpec& hp() const { return job.spec().training_input().hyperparameters(); }
  bool ServiceObserved(const std::string& name) const {
    for (const ObservedService& s : observed.services) {
      if (s.name == name) return true;
    }
    return false;
  }
};

absl::Duration RecreateBackoff(int restarts, absl::Duration base) {
  if (restarts <= 0) return absl::ZeroDuration();
  absl::Duration delay = std::min(base, kRecreateBackoffMax);
  for (int i = 1; i < restarts && delay < kRecreateBackoffMax; ++i) delay *= 2;
  return std::min(delay, kRecreateBackoffMax);
}

// Deletes a replica (and its Service) unless deletion is already under way;
// force-deletes one stuck past its grace period.
void DeleteReplicaOnce(Context& c, const ObservedReplica& r, const std::string& reason,
                       bool with_service = true) {
  if (!r.deletion_requested) {
    c.result.actions.push_back(DeleteReplica{r.name, IsLost(r), reason});
  } else if (r.phase != ReplicaPhase::kSucceeded && r.phase != ReplicaPhase::kFailed) {
    if (c.now >= r.deletion_time) {
      c.result.actions.push_back(DeleteReplica{r.name, true, reason + " (stuck terminating)"});
    } else {
      c.RequeueAt(r.deletion_time);
    }
  }
  if (with_service && c.options.services && c.ServiceObserved(r.name)) {
    c.result.actions.push_back(DeleteService{r.name});
  }
}

// What a replica set amounts to after one pass over it.
struct SetOutcome {
  enum class Phase { kCreating, kStarting, kRunning, kSucceeded, kFailed };
  Phase phase = Phase::kCreating;
  std::string reason;   // for kFailed: the condition reason
  std::string message;  // for kFailed / kSucceeded
  int replicas = 0;
};

// ---- Replicas --------------------------------------------------------------

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
  if (group.config.image_uri().empty()) r.image_pull_policy = "IfNotPresent";
  if (group.config.container_command_size() > 0) {
    r.command.assign(group.config.container_command().begin(),
                     group.config.container_command().end());
  } else if (RunsPythonModule(input, group.config)) {
    PythonModuleRun run = PlanPythonModule(input);
    r.command = std::move(run.command);
    r.package_mounts = std::move(run.mounts);
    r.python_module = input.python_module();
    if (group.config.image_uri().empty()) r.image = PythonRuntimeImage(input);
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

// ---- One replica set (the job, or one trial) -------------------------------

// Brings one replica set towards its desired state and says where it stands.
// `set_created`: every replica of the set has been observed at least once
// (job: the Created condition; trial: state past QUEUED). Only then does a
// missing replica wait for the recreation backoff.
SetOutcome ReconcileSet(Context& c, const std::string& trial_id,
                        const tuner::Assignment& hyperparameters,
                        const std::map<ReplicaKey, const ObservedReplica*>& observed,
                        bool set_created) {
  SetOutcome out;
  // Slots first; DesiredReplicas (TF_CONFIG and all) are built only for what
  // must be created, which a settled job never needs.
  struct Slot {
    ReplicaKey key;
    std::string name;
    const api::ReplicaGroup* group;
  };
  std::vector<Slot> slots;
  for (const api::ReplicaGroup& group : c.groups) {
    for (int64_t i = 0; i < group.count; ++i) {
      ReplicaKey key{trial_id, group.role, i};
      std::string name = ReplicaName(c.job_name, key, c.use_chief());
      slots.push_back({std::move(key), std::move(name), &group});
    }
  }
  auto build = [&](const Slot& slot) {
    return MakeReplica(c.job, c.groups, *slot.group, slot.key.index, trial_id, hyperparameters,
                       c.options);
  };
  out.replicas = static_cast<int>(slots.size());
  const bool has_master = std::any_of(c.groups.begin(), c.groups.end(), [](const auto& g) {
    return g.role == Role::kMaster && g.count > 0;
  });
  const ReplicaKey deciding{trial_id, has_master ? Role::kMaster : Role::kWorker, 0};
  const v1::RunPolicy::RestartPolicy policy = c.policy().restart_policy();
  const int backoff_limit = c.policy().backoff_limit();

  // A crash loop that spends the backoff budget is blamed on the live
  // replica restarted in place most often (the first in slot order on a tie).
  const ObservedReplica* most_restarted_in_place = nullptr;
  for (const Slot& want : slots) {
    auto it = observed.find(want.key);
    if (it == observed.end() || it->second->container_restarts == 0) continue;
    if (it->second->phase != ReplicaPhase::kRunning &&
        it->second->phase != ReplicaPhase::kPending) {
      continue;
    }
    if (most_restarted_in_place == nullptr ||
        it->second->container_restarts > most_restarted_in_place->container_restarts) {
      most_restarted_in_place = it->second;
    }
  }

  int present = 0, running = 0;
  bool deciding_succeeded = false;
  std::optional<std::pair<std::string, std::string>> failure;  // reason, message
  std::vector<const Slot*> to_create;
  std::vector<const Slot*> service_creates;
  for (const Slot& want : slots) {
    auto it = observed.find(want.key);
    const ObservedReplica* r = it == observed.end() ? nullptr : it->second;
    if (r == nullptr) {
      to_create.push_back(&want);
      continue;
    }
    ++present;
    if (c.options.services && !r->deletion_requested && !c.ServiceObserved(want.name)) {
      service_creates.push_back(&want);
    }
    ReplicaPhase phase = r->phase;
    if (r->node_lost) phase = ReplicaPhase::kUnknown;
    if (r->deletion_requested) {
      const bool stopped = phase == ReplicaPhase::kSucceeded || phase == ReplicaPhase::kFailed;
      if (stopped || c.now < r->deletion_time) {
        // Going away (our restart, or someone else's delete): wait for it.
        if (!stopped) c.RequeueAt(r->deletion_time);
        continue;
      }
      // Still "running" past its grace period: its node is gone. A failure
      // like any lost replica (the reconciler only deletes replicas that
      // have stopped, so this deletion was not a restart of ours).
      phase = ReplicaPhase::kUnknown;
    }
    switch (phase) {
      case ReplicaPhase::kSucceeded:
        ++running;  // complete: never run again
        if (r->key == deciding) deciding_succeeded = true;
        break;
      case ReplicaPhase::kRunning:
      case ReplicaPhase::kPending:
        if (phase == ReplicaPhase::kRunning) ++running;
        // Restarted in place by the kubelet (OnFailure/Always) once too often:
        // the budget is spent, so a crash loop ends instead of running on.
        if (r == most_restarted_in_place && c.status().restart_count() > backoff_limit &&
            !failure) {
          std::string what = TaskName(r->key, c.use_chief()) + " restarted in place " +
                             std::to_string(r->container_restarts) +
                             (r->container_restarts == 1 ? " time" : " times");
          if (r->exit_code) what += ", last exit code " + std::to_string(*r->exit_code);
          if (!r->termination_message.empty()) what += ": " + r->termination_message;
          failure = {"BackoffLimitExceeded", "backoffLimit " + std::to_string(backoff_limit) +
                                                 " exceeded (" +
                                                 std::to_string(c.status().restart_count()) +
                                                 " restarts): " + Truncate(what)};
        }
        break;
      case ReplicaPhase::kFailed:
      case ReplicaPhase::kUnknown: {
        // A failed pod whose container did not fail (no exit code, or 0) failed
        // at the pod level: eviction, preemption, a lost node.
        const bool pod_level =
            phase == ReplicaPhase::kUnknown || !r->exit_code.has_value() || *r->exit_code == 0;
        bool retryable = false;
        switch (policy) {
          case v1::RunPolicy::OnFailure:
          case v1::RunPolicy::Always:
            retryable = true;
            break;
          case v1::RunPolicy::ExitCode:
            retryable = pod_level || *r->exit_code >= 128;
            break;
          default:
            retryable = false;
        }
        const std::string what =
            r->deletion_requested && !IsLost(*r)
                ? TaskName(r->key, c.use_chief()) +
                      " is stuck terminating past its grace period: its node is "
                      "unreachable"
                : DescribeFailure(*r, c.use_chief());
        if (!retryable) {
          if (!failure) failure = {"ReplicaFailed", what};
        } else if (c.status().restart_count() >= backoff_limit) {
          if (!failure) {
            failure = {"BackoffLimitExceeded",
                       "backoffLimit " + std::to_string(backoff_limit) + " reached (" +
                           std::to_string(c.status().restart_count()) + " restarts): " + what};
          }
        } else {
          c.status().set_restart_count(c.status().restart_count() + 1);
          ToProto(c.now, c.status().mutable_last_restart_time());
          const std::string message = what + "; restarting (restart " +
                                      std::to_string(c.status().restart_count()) + " of " +
                                      std::to_string(backoff_limit) + ")";
          c.Emit(EmitEvent::Type::kWarning, "Restarting", message);
          SetCondition(&c.status(), kRestarting, true, "ReplicaRestarting", message, c.now);
          SetCondition(&c.status(), kRunning, false, "ReplicaRestarting", message, c.now);
          // The Service stays: the new replica has the same name and labels.
          c.result.actions.push_back(
              DeleteReplica{r->name, phase == ReplicaPhase::kUnknown, "restarting"});
        }
        break;
      }
    }
  }

  if (failure) {
    out.phase = SetOutcome::Phase::kFailed;
    out.reason = failure->first;
    out.message = failure->second;
    return out;
  }
  if (deciding_succeeded) {
    out.phase = SetOutcome::Phase::kSucceeded;
    out.message = TaskName(deciding, c.use_chief()) + " succeeded";
    return out;
  }

  for (const Slot* want : service_creates) c.result.actions.push_back(CreateService{build(*want)});
  if (!to_create.empty()) {
    std::optional<absl::Time> due;
    if (set_created && c.status().restart_count() > 0 && c.status().has_last_restart_time()) {
      due = FromProto(c.status().last_restart_time()) +
            RecreateBackoff(c.status().restart_count(), c.options.recreate_backoff_base);
    }
    if (due && c.now < *due) {
      c.RequeueAt(*due);
    } else {
      for (const Slot* want : to_create) {
        DesiredReplica replica = build(*want);
        if (c.options.services && !c.ServiceObserved(want->name)) {
          c.result.actions.push_back(CreateService{replica});
        }
        c.result.actions.push_back(CreateReplica{std::move(replica)});
      }
    }
  }

  if (present < out.replicas) {
    out.phase = SetOutcome::Phase::kCreating;
  } else if (running < out.replicas) {
    out.phase = SetOutcome::Phase::kStarting;
  } else {
    out.phase = SetOutcome::Phase::kRunning;
  }
  return out;
}

// ---- Bookkeeping shared by jobs and studies --------------------------------

// Per-role replica counts (status.replicaStatuses), once the pass has
// decided: a replica this very pass deletes (a clean-up, a restart, an early
// stop) is counted as gone, one asked to go earlier and still terminating is
// not active. Every path, finished jobs included, so a clean-up shows.
void SetReplicaStatuses(Context& c) {
  std::set<std::string> deleting;
  for (const Action& a : c.result.actions) {
    if (auto* d = std::get_if<DeleteReplica>(&a)) deleting.insert(d->name);
  }
  std::map<std::string, v1::ReplicaStatus> counts;
  for (const ObservedReplica& r : c.observed.replicas) {
    if (deleting.count(r.name) > 0) continue;
    v1::ReplicaStatus& s = counts[std::string(api::RoleName(r.key.role))];
    if (r.phase == ReplicaPhase::kSucceeded) {
      s.set_succeeded(s.succeeded() + 1);
    } else if (r.phase == ReplicaPhase::kFailed) {
      s.set_failed(s.failed() + 1);
    } else if (!r.deletion_requested) {
      s.set_active(s.active() + 1);
    }
    s.set_restarts(s.restarts() + r.container_restarts);
  }
  c.status().clear_replica_statuses();
  for (const auto& [role, s] : counts) (*c.status().mutable_replica_statuses())[role] = s;
}

// Container restarts added to restartCount. Restarts are counted per pod
// (status.countedContainerRestarts): a role's sum would let a pod that went
// away hide another pod's new restarts.
void CountReplicas(Context& c) {
  // Growth since the last pass, per pod.
  const auto& counted = c.status().counted_container_restarts();
  int grown = 0;
  const ObservedReplica* most_restarted = nullptr;
  int most_grown = 0;
  google::protobuf::Map<std::string, int32_t> now_counted;
  for (const ObservedReplica& r : c.observed.replicas) {
    if (r.container_restarts <= 0) continue;
    now_counted[r.name] = r.container_restarts;
    auto it = counted.find(r.name);
    const int before = it == counted.end() ? 0 : it->second;
    const int pod_grown =
        r.container_restarts >= before ? r.container_restarts - before : r.container_restarts;
    grown += pod_grown;
    if (pod_grown > most_grown) {
      most_grown = pod_grown;
      most_restarted = &r;
    }
  }
  *c.status().mutable_counted_container_restarts() = std::move(now_counted);
  if (most_restarted != nullptr) {  // some pod grew
    c.status().set_restart_count(c.status().restart_count() + grown);
    std::string last = TaskName(most_restarted->key, c.use_chief()) + " restarted in place (" +
                       std::to_string(most_restarted->container_restarts) + " so far)";
    if (most_restarted->exit_code) {
      last += ", last exit code " + std::to_string(*most_restarted->exit_code);
    }
    if (!most_restarted->termination_message.empty()) {
      last += ": " + most_restarted->termination_message;
    }
    c.Emit(EmitEvent::Type::kWarning, "Restarting",
           last + " (restart " + std::to_string(c.status().restart_count()) + " of " +
               std::to_string(c.policy().backoff_limit()) + ")");
  }
}

// ReplicasWaiting (waiting_reasons.h): what keeps the job's current
// replicas (the job's, or its active trials') from running, with one Warning
// event per cause the condition did not already name.
void UpdateWaitingCondition(Context& c) {
  std::set<std::string> current = {""};
  for (const v1::HyperparameterOutput& t : c.status().training_output().trials()) {
    if (!IsTerminal(t.state())) current.insert(t.trial_id());
  }
  std::vector<const ObservedReplica*> waiting;
  for (const ObservedReplica& r : c.observed.replicas) {
    if (r.waiting && !r.deletion_requested && current.count(r.key.trial_id) > 0 &&
        (r.phase == ReplicaPhase::kPending || r.phase == ReplicaPhase::kRunning)) {
      waiting.push_back(&r);
    }
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const ObservedReplica* a, const ObservedReplica* b) { return a->key < b->key; });
  std::vector<WaitingReplica> replicas;
  for (const ObservedReplica* r : waiting) {
    replicas.push_back({TaskName(r->key, c.use_chief()), *r->waiting});
  }
  const v1::Condition* previous = FindCondition(&c.status(), kReplicasWaitingCondition);
  const WaitingSummary summary = SummarizeWaiting(
      replicas, previous != nullptr && previous->status() == "True" ? previous->message() : "");
  if (summary.reason.empty()) {
    SetCondition(&c.status(), kReplicasWaitingCondition, false, "ReplicasNotWaiting", "", c.now);
    return;
  }
  SetCondition(&c.status(), kReplicasWaitingCondition, true, summary.reason,
               Truncate(summary.message), c.now);
  for (const WaitingCause& cause : summary.new_causes) {
    c.Emit(EmitEvent::Type::kWarning, cause.reason, cause.message);
  }
}

void SetTerminal(Context& c, v1::State state) {
  c.status().set_state(state);
  if (!c.status().has_end_time()) ToProto(c.now, c.status().mutable_end_time());
  SetCondition(&c.status(), kRunning, false, v1::State_Name(state), "", c.now);
  SetCondition(&c.status(), kRestarting, false, v1::State_Name(state), "", c.now);
}

void FailJob(Context& c, const std::string& reason, const std::string& message) {
  SetTerminal(c, v1::FAILED);
  c.status().set_error_message(Truncate(message));
  SetCondition(&c.status(), kFailed, true, reason, Truncate(message), c.now);
  c.Emit(EmitEvent::Type::kWarning, reason, message);
}

void SucceedJob(Context& c, const std::string& message) {
  SetTerminal(c, v1::SUCCEEDED);
  SetCondition(&c.status(), kSucceeded, true, "JobSucceeded", message, c.now);
  c.Emit(EmitEvent::Type::kNormal, "JobSucceeded", message);
}

// Moves the job's state forward (never back) from its replicas' progress.
void AdvanceState(Context& c, SetOutcome::Phase phase, int replicas) {
  v1::TrainingJobStatus& s = c.status();
  if (phase >= SetOutcome::Phase::kStarting) {
    if (SetCondition(&s, kCreated, true, "ReplicasCreated",
                     std::to_string(replicas) + " replicas created", c.now)) {
      c.Emit(EmitEvent::Type::kNormal, "ReplicasCreated",
             std::to_string(replicas) + " replicas created");
    }
    if (s.state() == v1::QUEUED) s.set_state(v1::PREPARING);
  }
  if (phase == SetOutcome::Phase::kRunning) {
    if (s.state() == v1::QUEUED || s.state() == v1::PREPARING) {
      s.set_state(v1::RUNNING);
      ToProto(c.now, s.mutable_start_time());
    }
    if (SetCondition(&s, kRunning, true, "ReplicasRunning",
                     "all " + std::to_string(replicas) + " replicas running", c.now)) {
      c.Emit(EmitEvent::Type::kNormal, "Running",
             "all " + std::to_string(replicas) + " replicas running");
    }
    SetCondition(&s, kRestarting, false, "ReplicasRunning", "", c.now);
  }
}

// Deletes what the finished job no longer needs, per cleanPodPolicy.
void CleanUp(Context& c, v1::RunPolicy::CleanPodPolicy policy, const std::string& trial_id,
             bool only_trial) {
  for (const ObservedReplica& r : c.observed.replicas) {
    if (only_trial && r.key.trial_id != trial_id) continue;
    const bool active = r.phase == ReplicaPhase::kPending || r.phase == ReplicaPhase::kRunning ||
                        r.phase == ReplicaPhase::kUnknown;
    if (policy == v1::RunPolicy::All || (policy == v1::RunPolicy::Running && active)) {
      DeleteReplicaOnce(c, r, "cleanPodPolicy " + v1::RunPolicy::CleanPodPolicy_Name(policy));
    }
  }
  if (policy == v1::RunPolicy::All && c.options.services) {
    for (const ObservedService& s : c.observed.services) {
      if (only_trial && s.key.trial_id != trial_id) continue;
      bool pending = false;
      for (const Action& a : c.result.actions) {
        if (auto* d = std::get_if<DeleteService>(&a); d && d->name == s.name) pending = true;
      }
      if (!pending) c.result.actions.push_back(DeleteService{s.name});
    }
  }
}

void ApplyTtl(Context& c) {
  const v1::RunPolicy& policy = c.stored.spec().run_policy();
  if (!policy.has_ttl_seconds_after_finished() || !c.status().has_end_time()) return;
  const absl::Time expiry =
      FromProto(c.status().end_time()) + absl::Seconds(policy.ttl_seconds_after_finished());
  if (c.now >= expiry) {
    c.result.delete_job = true;
  } else {
    c.RequeueAt(expiry);
  }
}

// Fails the job when a deadline has passed; otherwise asks to be woken at the
// next one. Returns true when the job failed.
bool CheckDeadlines(Context& c, bool enforce) {
  const v1::TrainingJobStatus& s = c.status();
  const absl::Time created = FromProto(s.create_time());
  struct Deadline {
    absl::Time at;
    std::string reason;
    std::string message;
  };
  std::vector<Deadline> deadlines;
  if (c.policy().has_active_deadline_seconds()) {
    const absl::Duration limit = absl::Seconds(c.policy().active_deadline_seconds());
    deadlines.push_back({created + limit, "DeadlineExceeded",
                         "activeDeadlineSeconds " + DurationText(limit) + " exceeded"});
  }
  const v1::Scheduling& scheduling = c.job.spec().training_input().scheduling();
  if (s.has_start_time() && scheduling.has_max_running_time()) {
    const absl::Duration limit = FromProto(scheduling.max_running_time());
    deadlines.push_back({FromProto(s.start_time()) + limit, "MaxRunningTimeExceeded",
                         "scheduling.maxRunningTime " + DurationText(limit) + " exceeded"});
  }
  if (!s.has_start_time() && scheduling.has_max_wait_time()) {
    const absl::Duration limit = FromProto(scheduling.max_wait_time());
    std::string message = "scheduling.maxWaitTime " + DurationText(limit) +
                          " exceeded before the job started running";
    if (const v1::Condition* waiting = FindCondition(&c.status(), kReplicasWaitingCondition);
        waiting != nullptr && waiting->status() == "True") {
      message += "; last waiting reason " + waiting->reason() + ": " + waiting->message();
    }
    deadlines.push_back({created + limit, "MaxWaitTimeExceeded", std::move(message)});
  }
  for (const Deadline& d : deadlines) {
    if (enforce && c.now >= d.at) {
      FailJob(c, d.reason, d.message);
      return true;
    }
  }
  for (const Deadline& d : deadlines) c.RequeueAt(d.at);
  return false;
}

std::map<ReplicaKey, const ObservedReplica*> IndexReplicas(Context& c,
                                                           const std::set<std::string>& trials) {
  std::map<ReplicaKey, const ObservedReplica*> index;
  for (const ObservedReplica& r : c.observed.replicas) {
    if (trials.count(r.key.trial_id) == 0) continue;
    const std::string expected = ReplicaName(c.job_name, r.key, c.use_chief());
    bool wanted = false;
    for (const api::ReplicaGroup& g : c.groups) {
      if (g.role == r.key.role && r.key.index < g.count) wanted = true;
    }
    if (wanted && r.name == expected) {
      index[r.key] = &r;
    }
  }
  return index;
}

// Replicas and Services of no current slot: left over from a changed spec,
// a trial that is gone, or another naming. Deleted. Those of `finished`
// trials are left to the trial's clean-up.
void DeleteStrays(Context& c, const std::map<ReplicaKey, const ObservedReplica*>& index,
                  const std::set<std::string>& active, const std::set<std::string>& finished) {
  for (const ObservedReplica& r : c.observed.replicas) {
    if (finished.count(r.key.trial_id) > 0) continue;
    auto it = index.find(r.key);
    if (it == index.end() || it->second != &r) DeleteReplicaOnce(c, r, "not part of the job");
  }
  if (!c.options.services) return;
  for (const ObservedService& s : c.observed.services) {
    if (finished.count(s.key.trial_id) > 0) continue;
    bool wanted =
        active.count(s.key.trial_id) > 0 && s.name == ReplicaName(c.job_name, s.key, c.use_chief());
    if (wanted) {
      wanted = false;
      for (const api::ReplicaGroup& g : c.groups) {
        if (g.role == s.key.role && s.key.index < g.count) wanted = true;
      }
    }
    if (!wanted) c.result.actions.push_back(DeleteService{s.name});
  }
}

// ---- A plain job ---------------------------------------------------------

void ReconcileJob(Context& c) {
  const std::set<std::string> trials = {""};
  const auto index = IndexReplicas(c, trials);
  DeleteStrays(c, index, trials, {});
  const SetOutcome out = ReconcileSet(c, "", {}, index, ConditionIsTrue(c.status(), kCreated));
  switch (out.phase) {
    case SetOutcome::Phase::kFailed:
      FailJob(c, out.reason, out.message);
      break;
    case SetOutcome::Phase::kSucceeded:
      SucceedJob(c, out.message);
      break;
    default:
      AdvanceState(c, out.phase, out.replicas);
  }
}

// ---- A tuning study ------------------------------------------------------

bool TrialActive(const v1::HyperparameterOutput& t) { return !IsTerminal(t.state()); }

bool HasObjective(const v1::HyperparameterOutput& t) {
  return t.state() == v1::SUCCEEDED && t.has_final_metric() && t.error_message().empty();
}

tuner::TrialRecord ToRecord(const v1::HyperparameterOutput& t) {
  tuner::TrialRecord record;
  record.trial_id = t.trial_id();
  record.assignment.insert(t.hyperparameters().begin(), t.hyperparameters().end());
  for (const v1::HyperparameterMetric& m : t.all_metrics()) {
    record.curve.emplace_back(m.training_step(), m.objective_value());
  }
  switch (t.state()) {
    case v1::QUEUED:
    case v1::PREPARING:
      record.status = tuner::TrialRecord::Status::kPending;
      break;
    case v1::RUNNING:
      record.status = tuner::TrialRecord::Status::kRunning;
      break;
    case v1::SUCCEEDED:
      if (HasObjective(t)) {
        record.status = t.is_trial_stopped_early() ? tuner::TrialRecord::Status::kStoppedEarly
                                                   : tuner::TrialRecord::Status::kCompleted;
        record.objective = t.final_metric().objective_value();
      } else {
        record.status = tuner::TrialRecord::Status::kFailed;
      }
      break;
    default:
      record.status = tuner::TrialRecord::Status::kFailed;
  }
  return record;
}

// The reports of the metric tag for one trial, in arrival order.
std::vector<v1::HyperparameterMetric> TagReports(const Context& c, const std::string& trial_id) {
  std::vector<v1::HyperparameterMetric> reports;
  auto it = c.observed.trial_metrics.find(trial_id);
  if (it == c.observed.trial_metrics.end()) return reports;
  const std::string& tag = c.hp().hyperparameter_metric_tag();
  for (const MetricReport& report : it->second) {
    auto value = report.values.find(tag);
    if (value == report.values.end() || !std::isfinite(value->second)) continue;
    v1::HyperparameterMetric m;
    m.set_training_step(report.step);
    m.set_objective_value(value->second);
    reports.push_back(m);
  }
  return reports;
}

// Whether the trial's trainer has sent its last evaluation (training is
// over; it is only finishing up: export, exit).
bool FinalReportArrived(const Context& c, const std::string& trial_id) {
  auto it = c.observed.trial_metrics.find(trial_id);
  if (it == c.observed.trial_metrics.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(),
                     [](const MetricReport& r) { return r.final; });
}

void UpdateTrialMetrics(const Context& c, v1::HyperparameterOutput* trial) {
  std::vector<v1::HyperparameterMetric> reports = TagReports(c, trial->trial_id());
  if (reports.empty()) return;  // keep what status has
  // Reports in status that this backend does not hold came before it (an
  // operator that led earlier wrote them): they stay, ahead of its own.
  std::vector<v1::HyperparameterMetric> merged;
  for (const v1::HyperparameterMetric& m : trial->all_metrics()) {
    const bool held = std::any_of(reports.begin(), reports.end(), [&](const auto& r) {
      return r.training_step() == m.training_step() && r.objective_value() == m.objective_value();
    });
    if (!held) merged.push_back(m);
  }
  merged.insert(merged.end(), reports.begin(), reports.end());
  const size_t skip = merged.size() > kMaxMetricsPerTrial ? merged.size() - kMaxMetricsPerTrial : 0;
  trial->clear_all_metrics();
  for (size_t i = skip; i < merged.size(); ++i) *trial->add_all_metrics() = merged[i];
}

// true when `a` is a better objective than `b` under the study's goal.
bool Better(const v1::HyperparameterSpec& spec, double a, double b) {
  return spec.goal() == v1::HyperparameterSpec::MINIMIZE ? a < b : a > b;
}

int64_t TrialNumber(const std::string& id) {
  int64_t n = 0;
  for (char ch : id) {
    if (ch < '0' || ch > '9') return INT64_MAX;
    n = n * 10 + (ch - '0');
  }
  return n;
}

// Best first: trials with an objective by goal, then the rest by trial id.
bool TrialBefore(const v1::HyperparameterSpec& spec, const v1::HyperparameterOutput& a,
                 const v1::HyperparameterOutput& b) {
  const bool ha = HasObjective(a), hb = HasObjective(b);
  if (ha != hb) return ha;
  if (ha) {
    const double va = a.final_metric().objective_value(), vb = b.final_metric().objective_value();
    if (Better(spec, va, vb)) return true;
    if (Better(spec, vb, va)) return false;
  }
  return TrialNumber(a.trial_id()) < TrialNumber(b.trial_id());
}

void FinishTrial(Context& c, v1::HyperparameterOutput* trial, v1::State state,
                 const std::string& error, bool stop_replicas) {
  trial->set_state(state);
  trial->set_error_message(Truncate(error));
  ToProto(c.now, trial->mutable_end_time());
  // A finished trial's ps and evaluators must not run on; a stopped one
  // stops whatever the cleanPodPolicy.
  const v1::RunPolicy::CleanPodPolicy policy =
      stop_replicas && c.policy().clean_pod_policy() == v1::RunPolicy::None
          ? v1::RunPolicy::Running
          : c.policy().clean_pod_policy();
  CleanUp(c, policy, trial->trial_id(), /*only_trial=*/true);
}

void FinishTrialWithObjective(Context& c, v1::HyperparameterOutput* trial, bool stopped_early) {
  UpdateTrialMetrics(c, trial);
  if (trial->all_metrics_size() == 0) {
    FinishTrial(c, trial, v1::SUCCEEDED,
                "succeeded without reporting metric '" + c.hp().hyperparameter_metric_tag() +
                    "': not counted as completed",
                false);
    c.Emit(EmitEvent::Type::kWarning, "TrialMetricMissing",
           "trial " + trial->trial_id() + " " + trial->error_message());
    return;
  }
  // The objective is the last value reported (what the trainer saw last),
  // not the best one.
  *trial->mutable_final_metric() = trial->all_metrics(trial->all_metrics_size() - 1);
  trial->set_is_trial_stopped_early(stopped_early);
  FinishTrial(c, trial, v1::SUCCEEDED, "", stopped_early);
  c.Emit(EmitEvent::Type::kNormal, stopped_early ? "TrialStoppedEarly" : "TrialSucceeded",
         "trial " + trial->trial_id() + ": objective " +
             ObjectiveText(trial->final_metric().objective_value()) + " at step " +
             std::to_string(trial->final_metric().training_step()));
}

std::string DescribeAssignment(const v1::HyperparameterSpec& spec,
                               const tuner::Assignment& assignment) {
  std::string text;
  for (const v1::ParameterSpec& p : spec.params()) {
    auto it = assignment.find(p.parameter_name());
    if (it == assignment.end()) continue;
    if (!text.empty()) text += " ";
    text += "--" + p.parameter_name() + "=" + it->second;
  }
  return text;
}

// Evicts the worst finished trials past kMaxTrialsInStatus. While the study
// runs only trials with an objective leave (failed and metric-less trials
// stay, so the failure count never depends on the job store); once it is
// over, any finished trial may.
void CapTrials(Context& c, bool study_over) {
  auto* trials = c.status().mutable_training_output()->mutable_trials();
  if (trials->size() <= kMaxTrialsInStatus) return;
  std::vector<v1::HyperparameterOutput> all(trials->begin(), trials->end());
  std::vector<size_t> candidates;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!TrialActive(all[i]) && (study_over || HasObjective(all[i]))) candidates.push_back(i);
  }
  // Worst first.
  std::sort(candidates.begin(), candidates.end(),
            [&](size_t a, size_t b) { return TrialBefore(c.hp(), all[b], all[a]); });
  std::set<size_t> evict;
  for (size_t i : candidates) {
    if (all.size() - evict.size() <= static_cast<size_t>(kMaxTrialsInStatus)) break;
    evict.insert(i);
  }
  trials->Clear();
  for (size_t i = 0; i < all.size(); ++i) {
    if (evict.count(i) > 0) {
      c.result.actions.push_back(ArchiveTrial{all[i]});
    } else {
      *trials->Add() = all[i];
    }
  }
}

// What `kubectl get tj` shows of a study: status.trialProgress
// ("<completed>/<maxTrials>", "0/10" before the first trial completes) and
// status.bestObjectiveValue (the best final objective so far, archived trials
// included; never worse than the one already recorded, since a backend
// without a job store forgets evicted trials).
void SummarizeStudy(Context& c) {
  v1::TrainingJobStatus& s = c.status();
  s.set_trial_progress(std::to_string(s.training_output().completed_trial_count()) + "/" +
                       std::to_string(c.hp().max_trials()));
  std::optional<double> best;
  if (s.has_best_objective_value()) best = s.best_objective_value();
  auto consider = [&](const v1::HyperparameterOutput& t) {
    if (!HasObjective(t)) return;
    const double value = t.final_metric().objective_value();
    if (!best || Better(c.hp(), value, *best)) best = value;
  };
  for (const v1::HyperparameterOutput& t : s.training_output().trials()) consider(t);
  for (const v1::HyperparameterOutput& t : c.observed.archived_trials) consider(t);
  if (best) s.set_best_objective_value(*best);
}

void StopActiveTrials(Context& c, const std::string& why) {
  for (v1::HyperparameterOutput& t : *c.status().mutable_training_output()->mutable_trials()) {
    if (TrialActive(t)) FinishTrial(c, &t, v1::CANCELLED, why, /*stop_replicas=*/true);
  }
}

// ---- A resumed study (resumePreviousJobId) ----------------------------------

constexpr char kResumeField[] = "spec.trainingInput.hyperparameters.resumePreviousJobId";

// Why the earlier study cannot be continued; "" when it can.
std::string PreviousStudyProblem(const Context& c) {
  const std::string& id = c.hp().resume_previous_job_id();
  const PreviousStudy& previous = c.observed.previous_study;
  const std::string quoted = "job '" + id + "'";
  if (api::KubernetesName(id) == api::KubernetesName(c.job.metadata().name())) {
    return "names this job itself";
  }
  if (!previous.found) {
    const std::string& ns = c.job.metadata().namespace_();
    return "no " + quoted + " found" + (ns.empty() ? "" : " in namespace '" + ns + "'");
  }
  const v1::TrainingJob earlier = Normalize(previous.job);
  if (!IsStudy(earlier)) return quoted + " is not a hyperparameter tuning job";
  if (!IsTerminal(previous.job.status().state())) {
    return quoted + " is " +
           v1::State_Name(previous.job.status().state() == v1::STATE_UNSPECIFIED
                              ? v1::QUEUED
                              : previous.job.status().state()) +
           ": only a finished study can be resumed";
  }
  const v1::HyperparameterSpec& theirs = earlier.spec().training_input().hyperparameters();
  if (theirs.goal() != c.hp().goal()) {
    return quoted + " has goal " + v1::HyperparameterSpec::GoalType_Name(theirs.goal()) +
           ", this job " + v1::HyperparameterSpec::GoalType_Name(c.hp().goal());
  }
  if (theirs.hyperparameter_metric_tag() != c.hp().hyperparameter_metric_tag()) {
    return quoted + " has hyperparameterMetricTag '" + theirs.hyperparameter_metric_tag() +
           "', this job '" + c.hp().hyperparameter_metric_tag() + "'";
  }
  return "";
}

struct ResumedHistory {
  std::vector<tuner::TrialRecord> trials;  // completed, in this spec's canonical form
  int left_out = 0;                        // completed but not fitting this spec
};

// The earlier study's completed trials that fit this job's spec. Their ids
// are "<earlier job>/<trial id>", so they never collide with this job's.
ResumedHistory ResumedTrials(const Context& c) {
  ResumedHistory history;
  const PreviousStudy& previous = c.observed.previous_study;
  std::vector<const v1::HyperparameterOutput*> candidates;
  for (const auto& t : previous.job.status().training_output().trials()) candidates.push_back(&t);
  for (const auto& t : previous.archived_trials) candidates.push_back(&t);
  absl::StatusOr<tuner::SearchSpace> space = tuner::SearchSpace::Create(c.hp());
  std::set<std::string> seen;  // a trial both in status and archived counts once
  for (const v1::HyperparameterOutput* t : candidates) {
    if (!HasObjective(*t) || !seen.insert(t->trial_id()).second) continue;
    tuner::TrialRecord record = ToRecord(*t);
    // Canonicalize rejects a missing parameter or a value this spec does not
    // allow; with as many parameters as the spec, none can be unknown to it.
    absl::StatusOr<tuner::Assignment> canonical = absl::InvalidArgumentError("parameters differ");
    if (space.ok() && t->hyperparameters_size() == c.hp().params_size()) {
      canonical = space->Canonicalize(record.assignment);
    }
    if (!canonical.ok()) {
      ++history.left_out;
      continue;
    }
    record.assignment = *std::move(canonical);
    record.trial_id = previous.job.metadata().name() + "/" + t->trial_id();
    history.trials.push_back(std::move(record));
  }
  return history;
}

void ReconcileStudy(Context& c) {
  const v1::HyperparameterSpec& spec = c.hp();
  v1::TrainingOutput* out = c.status().mutable_training_output();
  out->set_is_hyperparameter_tuning_job(true);
  out->set_hyperparameter_metric_tag(spec.hyperparameter_metric_tag());
  if (out->total_trial_count() < out->trials_size()) out->set_total_trial_count(out->trials_size());

  // The earlier study this one continues: checked before the first trial;
  // afterwards its trials are used while it is still there and usable.
  ResumedHistory resumed;
  const bool first_trials = out->total_trial_count() == 0 && c.observed.archived_trials.empty();
  if (!spec.resume_previous_job_id().empty()) {
    const std::string problem = PreviousStudyProblem(c);
    if (!problem.empty() && first_trials) {
      FailJob(c, "PreviousStudyUnusable", std::string(kResumeField) + ": " + problem);
      return;
    }
    if (problem.empty()) resumed = ResumedTrials(c);
  }

  std::set<std::string> known;  // every trial on record, active or not
  std::set<std::string> active;
  for (const v1::HyperparameterOutput& t : out->trials()) {
    known.insert(t.trial_id());
    if (TrialActive(t)) active.insert(t.trial_id());
  }
  for (const v1::HyperparameterOutput& t : c.observed.archived_trials) known.insert(t.trial_id());
  std::map<ReplicaKey, const ObservedReplica*> index = IndexReplicas(c, active);
  // Replicas of unknown trials (or of none) are strays; those of finished
  // trials are left to the trial's clean-up below.
  std::set<std::string> finished;
  for (const std::string& id : known) {
    if (active.count(id) == 0) finished.insert(id);
  }
  DeleteStrays(c, index, active, finished);

  // Trials are finished against the history before new ones are started.
  // The stopping rule compares with the trials that ran to their end (a
  // stopped trial's curve ends where it was cut).
  std::vector<tuner::TrialRecord> completed;
  auto collect_completed = [&] {
    completed.clear();
    auto add = [&](tuner::TrialRecord record) {
      if (record.status == tuner::TrialRecord::Status::kCompleted) {
        completed.push_back(std::move(record));
      }
    };
    for (const v1::HyperparameterOutput& t : out->trials()) add(ToRecord(t));
    for (const v1::HyperparameterOutput& t : c.observed.archived_trials) add(ToRecord(t));
    for (const tuner::TrialRecord& t : resumed.trials) add(t);
  };
  collect_completed();

  SetOutcome::Phase best_phase = SetOutcome::Phase::kCreating;
  int replicas_per_trial = 0;
  for (v1::HyperparameterOutput& trial : *out->mutable_trials()) {
    if (!TrialActive(trial)) continue;
    tuner::Assignment assignment(trial.hyperparameters().begin(), trial.hyperparameters().end());
    const bool created = trial.state() != v1::QUEUED;
    const SetOutcome set = ReconcileSet(c, trial.trial_id(), assignment, index, created);
    replicas_per_trial = set.replicas;
    UpdateTrialMetrics(c, &trial);
    switch (set.phase) {
      case SetOutcome::Phase::kFailed:
        FinishTrial(c, &trial, v1::FAILED, set.message, /*stop_replicas=*/true);
        c.Emit(EmitEvent::Type::kWarning, "TrialFailed",
               "trial " + trial.trial_id() + " failed: " + set.message);
        continue;
      case SetOutcome::Phase::kSucceeded:
        FinishTrialWithObjective(c, &trial, /*stopped_early=*/false);
        collect_completed();  // later trials are judged against it too
        best_phase = std::max(best_phase, SetOutcome::Phase::kRunning);
        continue;
      default:
        break;
    }
    if (set.phase >= SetOutcome::Phase::kStarting && trial.state() == v1::QUEUED) {
      trial.set_state(v1::PREPARING);
    }
    if (set.phase == SetOutcome::Phase::kRunning && trial.state() == v1::PREPARING) {
      trial.set_state(v1::RUNNING);
    }
    best_phase = std::max(best_phase, set.phase);
    // A trial whose last evaluation has arrived has nothing left to stop.
    if (spec.enable_trial_early_stopping() && trial.all_metrics_size() > 0 && !completed.empty() &&
        !FinalReportArrived(c, trial.trial_id())) {
      const StopRule rule = c.options.stop_rule ? c.options.stop_rule : tuner::ShouldStopEarly;
      if (rule(spec, ToRecord(trial), completed)) {
        FinishTrialWithObjective(c, &trial, /*stopped_early=*/true);
        collect_completed();
      }
    }
  }

  // completedTrialCount counts trials with an objective, archived included.
  int64_t with_objective = 0;
  std::vector<std::string> failed_trials;
  for (const v1::HyperparameterOutput& t : out->trials()) {
    if (HasObjective(t)) ++with_objective;
    if (t.state() == v1::FAILED) {
      failed_trials.push_back("trial " + t.trial_id() + ": " + t.error_message());
    }
  }
  int64_t archived_failed = 0;
  for (const v1::HyperparameterOutput& t : c.observed.archived_trials) {
    if (HasObjective(t)) ++with_objective;
    if (t.state() == v1::FAILED) ++archived_failed;
  }
  // Monotone: a backend without a job store passes no archived trials, and a
  // completed trial stays completed.
  with_objective = std::max(with_objective, out->completed_trial_count());
  out->set_completed_trial_count(with_objective);

  const int64_t failed_count = static_cast<int64_t>(failed_trials.size()) + archived_failed;
  const int max_failed = api::EffectiveMaxFailedTrials(spec);
  if (failed_count >= max_failed) {
    std::string message = std::to_string(failed_count) + " trials failed (maxFailedTrials " +
                          std::to_string(max_failed) + ")";
    for (size_t i = 0; i < failed_trials.size() && i < 5; ++i) message += "; " + failed_trials[i];
    StopActiveTrials(c, "stopped: the job failed");
    FailJob(c, "TrialsFailed", message);
    return;
  }

  // Start new trials into the free slots.
  int running = 0;
  for (const v1::HyperparameterOutput& t : out->trials()) running += TrialActive(t) ? 1 : 0;
  const int64_t free_slots = std::min<int64_t>(spec.max_parallel_trials() - running,
                                               spec.max_trials() - out->total_trial_count());
  bool exhausted = false;
  if (free_slots > 0) {
    std::vector<tuner::TrialRecord> history = resumed.trials;
    for (const v1::HyperparameterOutput& t : c.observed.archived_trials) {
      history.push_back(ToRecord(t));
    }
    for (const v1::HyperparameterOutput& t : out->trials()) history.push_back(ToRecord(t));
    absl::StatusOr<std::unique_ptr<tuner::Tuner>> tuner =
        c.options.tuner_factory ? c.options.tuner_factory(spec, StableHash(c.job.metadata().uid()))
                                : tuner::Tuner::Create(spec, StableHash(c.job.metadata().uid()));
    if (!tuner.ok() || *tuner == nullptr) {
      StopActiveTrials(c, "stopped: the job failed");
      FailJob(c, "TunerError",
              "cannot create the tuner: " +
                  (tuner.ok() ? std::string("no tuner") : std::string(tuner.status().message())));
      return;
    }
    std::vector<tuner::Assignment> suggestions =
        (*tuner)->Suggest(history, static_cast<int>(free_slots));
    exhausted = static_cast<int64_t>(suggestions.size()) < free_slots;
    if (first_trials && !spec.resume_previous_job_id().empty()) {
      c.Emit(EmitEvent::Type::kNormal, "StudyResumed",
             "continuing the study of job '" + spec.resume_previous_job_id() + "': " +
                 std::to_string(resumed.trials.size()) + " completed trials seed the search" +
                 (resumed.left_out > 0 ? "; " + std::to_string(resumed.left_out) +
                                             " left out (their hyperparameters do not fit this "
                                             "spec)"
                                       : ""));
    }
    for (const tuner::Assignment& assignment : suggestions) {
      v1::HyperparameterOutput* trial = out->add_trials();
      out->set_total_trial_count(out->total_trial_count() + 1);
      trial->set_trial_id(std::to_string(out->total_trial_count()));
      trial->mutable_hyperparameters()->insert(assignment.begin(), assignment.end());
      trial->set_state(v1::QUEUED);
      ToProto(c.now, trial->mutable_start_time());
      c.Emit(EmitEvent::Type::kNormal, "TrialStarted",
             "trial " + trial->trial_id() + ": " + DescribeAssignment(spec, assignment));
      const SetOutcome set = ReconcileSet(c, trial->trial_id(), assignment, {}, false);
      replicas_per_trial = set.replicas;
      ++running;
    }
  }

  if (running == 0 && (out->total_trial_count() >= spec.max_trials() || exhausted)) {
    // The study is over: best first.
    std::vector<v1::HyperparameterOutput> sorted(out->trials().begin(), out->trials().end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](const auto& a, const auto& b) { return TrialBefore(spec, a, b); });
    out->clear_trials();
    for (v1::HyperparameterOutput& t : sorted) *out->add_trials() = std::move(t);
    CapTrials(c, /*study_over=*/true);
    const std::string ended =
        std::to_string(out->total_trial_count()) + " trials run" +
        (exhausted && out->total_trial_count() < spec.max_trials() ? " (search space exhausted)"
                                                                   : "");
    if (with_objective == 0) {
      FailJob(c, "NoTrialCompleted",
              ended + ", none reported metric '" + spec.hyperparameter_metric_tag() + "'");
    } else {
      const v1::HyperparameterOutput& best = out->trials(0);
      SucceedJob(c, ended + "; best trial " + best.trial_id() + ": objective " +
                        ObjectiveText(best.final_metric().objective_value()));
    }
    return;
  }
  CapTrials(c, /*study_over=*/false);
  AdvanceState(c, best_phase, replicas_per_trial);
}

// ---- Suspension ------------------------------------------------------------

// runPolicy.suspend: every replica goes and none is created until the flag is
// cleared; state, trials and restartCount stay as they are.
void ReconcileSuspended(Context& c) {
  if (SetCondition(&c.status(), kSuspended, true, "JobSuspended",
                   "runPolicy.suspend is true: replicas deleted", c.now)) {
    SetCondition(&c.status(), kRunning, false, "JobSuspended", "", c.now);
    c.Emit(EmitEvent::Type::kNormal, "Suspended", "the job was suspended; deleting its replicas");
  }
  for (const ObservedReplica& r : c.observed.replicas) DeleteReplicaOnce(c, r, "suspended");
  if (c.options.services) {
    for (const ObservedService& s : c.observed.services) {
      c.result.actions.push_back(DeleteService{s.name});
    }
  }
}

// ---- Cancellation ----------------------------------------------------------

void ReconcileCancel(Context& c) {
  if (c.status().state() != v1::CANCELLING) {
    c.status().set_state(v1::CANCELLING);
    SetCondition(&c.status(), kRunning, false, "Cancelling", "", c.now);
    c.Emit(EmitEvent::Type::kNormal, "Cancelling", "the job was cancelled; deleting its replicas");
  }
  if (c.status().has_training_output()) StopActiveTrials(c, "stopped: the job was cancelled");
  bool remaining = false;
  for (const ObservedReplica& r : c.observed.replicas) {
    DeleteReplicaOnce(c, r, "cancelled");
    const bool stopped = r.phase == ReplicaPhase::kSucceeded || r.phase == ReplicaPhase::kFailed;
    // A replica counts as gone once it is asked to go and has stopped, or is
    // past its grace period (force-deleted above): a lost node never blocks
    // CANCELLED.
    if (!r.deletion_requested || !(stopped || c.now >= r.deletion_time)) remaining = true;
  }
  if (c.options.services) {
    for (const ObservedService& s : c.observed.services) {
      bool pending = false;
      for (const Action& a : c.result.actions) {
        if (auto* d = std::get_if<DeleteService>(&a); d && d->name == s.name) pending = true;
      }
      if (!pending) c.result.actions.push_back(DeleteService{s.name});
    }
  }
  if (!remaining) {
    SetTerminal(c, v1::CANCELLED);
    SetCondition(&c.status(), kCancelled, true, "JobCancelled", "the job was cancelled", c.now);
    c.Emit(EmitEvent::Type::kNormal, "JobCancelled", "the job was cancelled");
  }
}

// ---- Outputs (output_storage.h) --------------------------------------------

bool ClaimObserved(const Context& c, const std::string& name) {
  return std::find(c.observed.claims.begin(), c.observed.claims.end(), name) !=
         c.observed.claims.end();
}

// status.outputLocation, each trial's outputPath, OutputsEphemeral, and the
// per-job claim while the job runs.
void ReconcileOutputs(Context& c) {
  v1::TrainingJobStatus& s = c.status();
  const v1::OutputLocation location =
      OutputLocationOf(c.job, c.options.replicas_have_own_filesystems);
  if (location.path().empty()) {
    s.clear_output_location();
  } else {
    *s.mutable_output_location() = location;
  }
  if (s.has_training_output()) {  // (mutable_ would add an empty one to a plain job)
    for (v1::HyperparameterOutput& trial : *s.mutable_training_output()->mutable_trials()) {
      if (trial.output_path().empty()) {
        trial.set_output_path(TrialOutputPath(location, trial.trial_id()));
      }
    }
  }
  if (location.ephemeral()) {
    const std::string message = EphemeralOutputsMessage(location);
    if (SetCondition(&s, kOutputsEphemeral, true, "NoOutputStorage", message, c.now)) {
      c.Emit(EmitEvent::Type::kWarning, kOutputsEphemeral, message);
    }
  } else {
    SetCondition(&s, kOutputsEphemeral, false, "OutputStorage", "", c.now);
  }
  const std::string claim = NewOutputClaimName(c.job);
  if (c.options.replicas_have_own_filesystems && !claim.empty() && !ClaimObserved(c, claim)) {
    c.result.actions.push_back(CreateClaim{claim});
  }
}

// A finished job's per-job claim goes when the spec asks for it.
void DeleteFinishedOutputClaim(Context& c) {
  const std::string claim = NewOutputClaimName(c.job);
  if (!claim.empty() && c.job.spec().output_storage().new_claim().delete_when_finished() &&
      ClaimObserved(c, claim)) {
    c.result.actions.push_back(DeleteClaim{claim});
  }
}

}  // namespace

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

bool IsTerminal(v1::State state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

std::vector<DesiredReplica> DesiredReplicas(const v1::TrainingJob& job, const std::string& trial_id,
                                            const tuner::Assignment& hyperparameters,
                                            const ReconcileOptions& options) {
  const v1::TrainingJob defaulted = Normalize(job);
  const std::vector<api::ReplicaGroup> groups =
      api::ReplicaGroups(defaulted.spec().training_input());
  return MakeReplicas(defaulted, groups, trial_id, hyperparameters, options);
}

ReconcileResult Reconcile(const v1::TrainingJob& job, const Observed& observed, absl::Time now,
                          const ReconcileOptions& options) {
  Context c{job, observed, now, options, job, {}, JobObjectName(job), {}};
  c.result.status = job.status();
  v1::TrainingJobStatus& s = c.status();

  if (!s.has_create_time()) {
    absl::Time created = now;
    std::string error;
    if (!job.metadata().creation_timestamp().empty() &&
        !absl::ParseTime(absl::RFC3339_full, job.metadata().creation_timestamp(), &created,
                         &error)) {
      created = now;
    }
    ToProto(created, s.mutable_create_time());
  }
  if (s.state() == v1::STATE_UNSPECIFIED) s.set_state(v1::QUEUED);

  // A valid study's status summary is refreshed after whatever this pass did.
  bool study = false;
  if (IsTerminal(s.state())) {
    // Finished: only clean-up and TTL. The spec may have changed since; the
    // policy in force is the one of the stored spec, defaulted.
    c.job = Normalize(job);
    study = IsStudy(c.job) && s.training_output().is_hyperparameter_tuning_job();
    CleanUp(c, s.state() == v1::CANCELLED ? v1::RunPolicy::All : c.policy().clean_pod_policy(), "",
            false);
    DeleteFinishedOutputClaim(c);
    ApplyTtl(c);
  } else if (std::vector<api::FieldError> errors = api::Validate(job); !errors.empty()) {
    c.job = Normalize(job);
    FailJob(c, "InvalidSpec", "invalid TrainingJob:\n" + api::FormatErrors(errors));
    CleanUp(c, c.policy().clean_pod_policy(), "", false);
    ApplyTtl(c);
  } else {
    c.job = Normalize(job);
    c.groups = api::ReplicaGroups(c.job.spec().training_input());
    study = IsStudy(c.job);
    s.set_observed_generation(job.metadata().generation());
    CountReplicas(c);
    if (!job.spec().cancel() && !c.policy().suspend()) UpdateWaitingCondition(c);
    if (job.spec().cancel()) {
      ReconcileCancel(c);
    } else if (CheckDeadlines(c, /*enforce=*/true)) {
      StopActiveTrials(c, "stopped: the job failed");
    } else if (c.policy().suspend()) {
      ReconcileSuspended(c);
    } else if (IsStudy(c.job)) {
      ReconcileStudy(c);
    } else {
      ReconcileJob(c);
    }
    ReconcileOutputs(c);  // after the study: its new trials get their folders
    if (!c.policy().suspend() && ConditionIsTrue(s, kSuspended)) {
      SetCondition(&s, kSuspended, false, "JobResumed", "runPolicy.suspend is false", now);
      c.Emit(EmitEvent::Type::kNormal, "Resumed", "the job was resumed; creating its replicas");
    }
    if (IsTerminal(s.state())) {
      c.result.requeue_after.reset();
      CleanUp(c, s.state() == v1::CANCELLED ? v1::RunPolicy::All : c.policy().clean_pod_policy(),
              "", false);
      DeleteFinishedOutputClaim(c);
      ApplyTtl(c);
    } else {
      CheckDeadlines(c, /*enforce=*/false);  // wake-ups, including deadlines set in this pass
    }
  }
  if (study) SummarizeStudy(c);

  // Nothing waits once the job is over, cancelled or suspended.
  if (IsTerminal(s.state()) || s.state() == v1::CANCELLING || c.policy().suspend()) {
    SetCondition(
        &s, kReplicasWaitingCondition, false,
        c.policy().suspend() && !IsTerminal(s.state()) ? "JobSuspended" : v1::State_Name(s.state()),
        "", now);
  }

  // Creates are pointless once the job is over; and a deletion of something
  // just being created cannot happen (creates only target missing slots).
  if (IsTerminal(s.state()) || s.state() == v1::CANCELLING) {
    std::erase_if(c.result.actions, [](const Action& a) {
      return std::holds_alternative<CreateReplica>(a) || std::holds_alternative<CreateService>(a) ||
             std::holds_alternative<CreateClaim>(a);
    });
  }
  // One delete per object, whatever several rules asked.
  std::set<std::string> deleted_replicas, deleted_services;
  std::erase_if(c.result.actions, [&](const Action& a) {
    if (auto* d = std::get_if<DeleteReplica>(&a)) return !deleted_replicas.insert(d->name).second;
    if (auto* d = std::get_if<DeleteService>(&a)) return !deleted_services.insert(d->name).second;
    return false;
  });
  std::set<std::string> created_services;
  std::erase_if(c.result.actions, [&](const Action& a) {
    if (auto* cs = std::get_if<CreateService>(&a)) {
      return !created_services.insert(cs->replica.name).second;
    }
    return false;
  });
  SetReplicaStatuses(c);

  c.result.status_changed =
      !google::protobuf::util::MessageDifferencer::Equals(job.status(), c.result.status);
  return std::move(c.result);
}

}  // namespace kubetrain::core
