#include "operator/core/reconciler.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/field_error.h"
#include "api/roles.h"
#include "api/scale_tiers.h"
#include "api/validation.h"
#include "google/protobuf/util/message_differencer.h"
#include "operator/core/admission_queue.h"
#include "operator/core/gang_admission.h"
#include "operator/core/output_storage.h"
#include "operator/core/reconcile_pass.h"

// The state machine: one pass over a job (reconciler.h is the contract,
// docs/reconciler.md the behaviour). The replicas a job asks for are built in
// desired_replicas.cc, tuning studies run in study.cc.

namespace kubetrain::core {

const api::PythonRuntimeCatalog& Runtimes(const ReconcileOptions& options) {
  return options.runtimes ? *options.runtimes : api::PythonRuntimeCatalog::BuiltIn();
}
namespace internal {

using api::Role;

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
  const ReplicaKey deciding = ChiefOf(c, trial_id);
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

  // Since when the deciding replica (the chief) has been running this time,
  // while it runs or waits to: its pod's creation or, restarted in place,
  // its current run. Peers that completed before then were not there for it
  // (see the rejoin below). InfinitePast: no such run to compare with.
  absl::Time chief_since = absl::InfinitePast();
  if (auto it = observed.find(deciding); it != observed.end()) {
    const ObservedReplica& chief = *it->second;
    if ((chief.phase == ReplicaPhase::kPending || chief.phase == ReplicaPhase::kRunning) &&
        !chief.deletion_requested && !chief.node_lost) {
      chief_since = std::max(chief.created, chief.run_since);
    }
  }

  // An elastic group (spec.elasticPolicy): its nodes are the master and the
  // workers, and it trains on while minReplicas of them are not lost.
  const bool elastic = c.job.spec().has_elastic_policy();
  int nodes = 0, lost_nodes = 0;
  for (const Slot& want : slots) {
    if (!elastic || (want.key.role != Role::kMaster && want.key.role != Role::kWorker)) continue;
    ++nodes;
    auto it = observed.find(want.key);
    if (it != observed.end() &&
        (it->second->phase == ReplicaPhase::kFailed || IsLost(*it->second))) {
      ++lost_nodes;
    }
  }
  const int64_t min_nodes = api::ElasticNodes(c.job.spec().elastic_policy(), nodes).min;
  // Only for the messages of an elastic job's losses: not built on every pass.
  auto group_left = [&] {
    return absl::StrCat("the elastic group goes on with ", nodes - lost_nodes, " of ", nodes,
                        " nodes (elasticPolicy.minReplicas ", min_nodes, ")");
  };

  // Elastic workers lost and not recreated, and why.
  struct LeftOut {
    const ObservedReplica* replica;
    std::string what;
  };
  std::vector<LeftOut> left_out;

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
        // A worker or ps that completed before the chief's current run began
        // (the chief restarted or was recreated after its peers finished):
        // a chief that resumes from a checkpoint before the end waits for
        // every peer, so they rejoin. Deleted now, created again once gone;
        // one with nothing left to do ends at once (docs/reconciler.md).
        if (r->key != deciding && r->key.role != Role::kEvaluator &&
            r->finished != absl::InfinitePast() && r->finished < chief_since) {
          const std::string chief = TaskName(deciding, c.use_chief());
          c.Emit(EmitEvent::Type::kNormal, "ReplicaRejoining",
                 TaskName(r->key, c.use_chief()) + " completed before " + chief +
                     " started again; running it again for " + chief +
                     ", which resumes with its peers");
          c.result.actions.push_back(DeleteReplica{r->name, false, "rejoining"});
          break;
        }
        ++running;  // complete: not run again unless the chief needs it back
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
        // A worker, not the master: the master's torchrun hosts the c10d
        // store, and the group does not outlive it.
        const bool elastic_worker = elastic && r->key.role == Role::kWorker;
        const bool budget_left = retryable && c.status().restart_count() < backoff_limit;
        if (elastic_worker && !budget_left) {
          // Not recreated: the group goes on without it, or ends (below).
          left_out.push_back(
              {r, what + (retryable
                              ? "; backoffLimit " + std::to_string(backoff_limit) + " reached"
                              : "; restartPolicy " + v1::RunPolicy::RestartPolicy_Name(policy))});
          break;
        }
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
          std::string message = what + "; restarting (restart " +
                                std::to_string(c.status().restart_count()) + " of " +
                                std::to_string(backoff_limit) + ")";
          if (elastic_worker) absl::StrAppend(&message, "; meanwhile ", group_left());
          c.Emit(EmitEvent::Type::kWarning, "Restarting", message);
          SetCondition(&c.status(), kRestarting, true, "ReplicaRestarting", message, c.now);
          if (!elastic_worker) {
            SetCondition(&c.status(), kRunning, false, "ReplicaRestarting", message, c.now);
          }
          // The Service stays: the new replica has the same name and labels.
          c.result.actions.push_back(
              DeleteReplica{r->name, phase == ReplicaPhase::kUnknown, "restarting"});
        }
        break;
      }
    }
  }

  if (!left_out.empty()) {
    // Told about the latest loss (the last to finish; a lost node has no
    // end), once: the Running condition keeps what was said.
    const LeftOut* latest = &left_out.front();
    for (const LeftOut& l : left_out) {
      if (l.replica->finished >= latest->replica->finished) latest = &l;
    }
    // Workers being recreated come back; those left out do not.
    const int kept = nodes - static_cast<int>(left_out.size());
    if (kept >= min_nodes) {
      const std::string message = Truncate(latest->what + ": not recreated; " + group_left());
      const v1::Condition* now_running = FindCondition(&c.status(), kRunning);
      if (now_running == nullptr || now_running->message() != message) {
        SetCondition(&c.status(), kRunning, true, "ElasticNodeLost", message, c.now);
        c.Emit(EmitEvent::Type::kWarning, "ElasticNodeLost", message);
      }
    } else if (!failure) {
      failure = {"ReplicaFailed",
                 absl::StrCat(latest->what, "; the elastic group has ", kept, " of ", nodes,
                              " nodes left, fewer than "
                              "elasticPolicy.minReplicas ",
                              min_nodes)};
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

namespace {

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
  for (const RefusedCreation& refused : c.observed.refused_creations) {
    if (current.count(refused.key.trial_id) == 0) continue;
    // A replica the spec no longer asks for (a count lowered since) is not
    // waited for.
    const bool wanted = std::any_of(c.groups.begin(), c.groups.end(), [&](const auto& g) {
      return g.role == refused.key.role && refused.key.index < g.count;
    });
    if (!wanted) continue;
    ReplicaWaiting failed_create;
    failed_create.reason = std::string(kFailedCreateReason);
    failed_create.message = refused.message;
    replicas.push_back({TaskName(refused.key, c.use_chief()), std::move(failed_create)});
  }
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
}  // namespace

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

namespace {

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
}  // namespace

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

namespace {

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

// ---- Admission -------------------------------------------------------------

bool AwaitsAdmission(const Context& c) {
  return c.options.gang_admission && !AdmittedByStatus(c.result.status) &&
         AdmittedElsewhere(c.job).empty();
}

// The backend's verdict, written with the status (Observed::admission).
void ApplyAdmissionVerdict(Context& c) {
  if (!c.options.gang_admission || !c.observed.admission || !AdmittedElsewhere(c.job).empty()) {
    return;
  }
  const AdmissionVerdict& verdict = *c.observed.admission;
  v1::TrainingJobStatus& s = c.status();
  const v1::Condition* current = FindAdmittedCondition(s);
  const bool was_admitted = AdmittedByStatus(s);
  if (!was_admitted) {
    const bool reason_changed = current == nullptr || current->reason() != verdict.reason;
    SetAdmittedCondition(&s, verdict.admitted(), verdict.reason, verdict.message, c.now);
    s.set_queue_position(verdict.position);
    // The event marks a job leaving the queue. One admitted on arrival has
    // none: its condition says so, and its pods' creation has its event
    // (a busy cluster's API server takes one write per job fewer).
    if (reason_changed && verdict.admitted() && current != nullptr) {
      c.Emit(EmitEvent::Type::kNormal, kAdmittedReason, verdict.message);
    } else if (reason_changed &&
               (verdict.reason == kNeverFitsReason || verdict.reason == kQuotaExceededReason)) {
      c.Emit(EmitEvent::Type::kWarning, verdict.reason, verdict.message);
    }
  }
  if (!verdict.admitted()) return;
  for (v1::HyperparameterOutput& trial : *s.mutable_training_output()->mutable_trials()) {
    if (!trial.awaiting_admission() || IsTerminal(trial.state()) ||
        absl::c_count(verdict.readmitted_trials, trial.trial_id()) == 0) {
      continue;
    }
    trial.set_awaiting_admission(false);
    c.Emit(EmitEvent::Type::kNormal, "TrialsAdmitted",
           absl::StrCat("trial ", trial.trial_id(),
                        " admitted again: all of its replicas can start now"));
  }
  if (verdict.admitted_trials <= s.admitted_trial_count()) return;
  if (was_admitted) {
    const int64_t more =
        verdict.admitted_trials -
        std::max(s.admitted_trial_count(), s.training_output().total_trial_count());
    if (more > 0) {
      c.Emit(EmitEvent::Type::kNormal, "TrialsAdmitted",
             more == 1
                 ? std::string("1 trial admitted: all of its replicas can start now")
                 : absl::StrCat(more, " trials admitted: all of their replicas can start now"));
    }
  }
  s.set_admitted_trial_count(verdict.admitted_trials);
}

// A job admitted, then holding part of the cluster while a replica it lost
// cannot be placed again: past schedulingPolicy.scheduleTimeoutSeconds the
// whole gang is released (every replica deleted, the job QUEUED again), so a
// half-running job never holds what another could run on. (A study's trials
// are gangs of their own: ReleaseUnplacedTrial.) Returns whether it released
// the gang.
bool ReleaseUnplacedGang(Context& c) {
  if (!c.options.gang_admission || !AdmittedElsewhere(c.job).empty() || IsStudy(c.job) ||
      !ConditionIsTrue(c.status(), kAdmittedCondition) ||
      (c.status().state() != v1::PREPARING && c.status().state() != v1::RUNNING)) {
    return false;
  }
  const ObservedReplica* stuck =
      UnplacedPastTimeout(c, [](const ObservedReplica&) { return true; });
  if (stuck == nullptr) return false;
  const std::string message =
      absl::StrCat(UnplacedReplicaText(c, *stuck),
                   ": the whole gang was released, and the job waits to be admitted again");
  for (const ObservedReplica& r : c.observed.replicas) DeleteReplicaOnce(c, r, "gang released");
  c.status().set_state(v1::QUEUED);
  SetCondition(&c.status(), kRunning, false, kGangReleasedReason, "", c.now);
  SetAdmittedCondition(&c.status(), false, kGangReleasedReason, message, c.now);
  c.Emit(EmitEvent::Type::kNormal, kGangReleasedReason, message);
  return true;
}

// Nothing is created until a verdict admits the job; until one comes, the
// job says it is queued (after kFirstVerdictWait: a verdict usually comes
// sooner, and is written with the job's first status).
void ReconcileAwaitingAdmission(Context& c) {
  if (FindAdmittedCondition(c.status()) != nullptr) return;
  SetAdmittedCondition(&c.status(), false, kQueuedReason,
                       "waiting for the operator to admit it: its pods are created once all of "
                       "them can be placed at once",
                       c.now);
}

// A new job's first verdict is still to come: how much longer to wait for it
// before the job writes that it is queued; nullopt when it should not wait.
std::optional<absl::Duration> FirstVerdictDue(const Context& c, const v1::TrainingJob& stored) {
  if (c.observed.admission || stored.status().state() != v1::STATE_UNSPECIFIED ||
      FindAdmittedCondition(stored.status()) != nullptr) {
    return std::nullopt;
  }
  absl::Time created;
  std::string unparsed;
  if (stored.metadata().creation_timestamp().empty() ||
      !absl::ParseTime(absl::RFC3339_full, stored.metadata().creation_timestamp(), &created,
                       &unparsed)) {
    return std::nullopt;
  }
  const absl::Duration left = created + kFirstVerdictWait - c.now;
  if (left <= absl::ZeroDuration()) return std::nullopt;
  return left;
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

// NoGpu (ReconcileOptions::machine_gpus): the roles that ask for more GPUs
// than the machine has, told once.
void ReconcileGpus(Context& c) {
  if (!c.options.machine_gpus) return;
  const int have = std::max(0, *c.options.machine_gpus);
  std::vector<std::string> short_of;
  for (const api::ReplicaGroup& g : c.groups) {
    const int64_t want = g.config.accelerator_config().has_count()
                             ? g.config.accelerator_config().count()
                             : g.resources.gpus;
    if (want <= have) continue;
    short_of.push_back(absl::StrCat(std::string(api::RoleName(g.role)), " asks for ", want,
                                    want == 1 ? " GPU" : " GPUs"));
  }
  v1::TrainingJobStatus& s = c.status();
  if (short_of.empty()) {
    // Only a job that was short of GPUs (its spec has changed since) carries
    // the condition.
    if (FindCondition(&s, kNoGpuCondition) != nullptr) {
      SetCondition(&s, kNoGpuCondition, false, "GpusAvailable", "", c.now);
    }
    return;
  }
  const std::string message =
      absl::StrCat(absl::StrJoin(short_of, ", "), "; this machine has ",
                   have == 0 ? std::string("none") : absl::StrCat(have),
                   ": the replicas run on the CPU, without the GPUs asked for");
  if (SetCondition(&s, kNoGpuCondition, true, "NotEnoughGpus", message, c.now)) {
    c.Emit(EmitEvent::Type::kWarning, kNoGpuCondition, message);
  }
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

// Reconcile, in the context of one pass.
ReconcileResult ReconcilePass(const v1::TrainingJob& job, const Observed& observed, absl::Time now,
                              const ReconcileOptions& options) {
  // Trials are archived before the status write that drops them from status.
  // When that write fails (a 409, an operator stopped between the two), or
  // the backend's copy of the job lags behind its archive, a trial is in
  // both places. It is counted once, as status has it: completedTrialCount,
  // the failed count and the tuner's history would otherwise hold it twice.
  std::set<std::string> in_status;
  for (const v1::HyperparameterOutput& t : job.status().training_output().trials()) {
    in_status.insert(t.trial_id());
  }
  std::set<std::string> in_both;
  for (const v1::HyperparameterOutput& t : observed.archived_trials) {
    if (in_status.count(t.trial_id()) > 0) in_both.insert(t.trial_id());
  }
  std::optional<Observed> once;
  if (!in_both.empty()) {
    once = observed;
    std::erase_if(once->archived_trials, [&](const v1::HyperparameterOutput& t) {
      return in_both.count(t.trial_id()) > 0;
    });
  }
  Context c{job, once ? *once : observed, now, options, job, {}, JobObjectName(job), {}};
  c.archived_and_in_status = std::move(in_both);
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
  } else if (std::vector<api::FieldError> errors =
                 api::Validate(job, {.runtimes = &Runtimes(options)});
             !errors.empty()) {
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
    } else if (ReleaseUnplacedGang(c)) {
      // Its replicas go; admission decides on it again.
    } else {
      ApplyAdmissionVerdict(c);
      if (AwaitsAdmission(c)) {
        if (std::optional<absl::Duration> due = FirstVerdictDue(c, job)) {
          // Nothing written yet: the verdict and the job's first status go
          // together.
          ReconcileResult waiting;
          waiting.status = job.status();
          waiting.requeue_after = *due;
          return waiting;
        }
        ReconcileAwaitingAdmission(c);
      } else if (IsStudy(c.job)) {
        ReconcileStudy(c);
      } else {
        ReconcileJob(c);
      }
    }
    ReconcileOutputs(c);  // after the study: its new trials get their folders
    ReconcileGpus(c);
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

}  // namespace
}  // namespace internal

bool IsTerminal(v1::State state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

ReconcileResult Reconcile(const v1::TrainingJob& job, const Observed& observed, absl::Time now,
                          const ReconcileOptions& options) {
  return internal::ReconcilePass(job, observed, now, options);
}

}  // namespace kubetrain::core
