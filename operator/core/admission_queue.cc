#include "operator/core/admission_queue.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"
#include "operator/core/reconcile_pass.h"
#include "operator/core/reconciler.h"

namespace kubetrain::core {
namespace {

// A trial's gang is keyed "<job key>#<trial>".
constexpr char kTrialSeparator = '#';

}  // namespace

bool AdmittedByStatus(const v1::TrainingJobStatus& status) {
  const v1::Condition* condition = FindAdmittedCondition(status);
  return (condition != nullptr && condition->status() == "True") ||
         (status.state() != v1::QUEUED && status.state() != v1::STATE_UNSPECIFIED);
}

bool TakesPartInAdmission(const v1::TrainingJob& job) {
  const v1::TrainingJobStatus& status = job.status();
  if (IsTerminal(status.state()) || status.state() == v1::CANCELLING || job.spec().cancel() ||
      job.spec().run_policy().suspend() || !AdmittedElsewhere(job).empty()) {
    return false;
  }
  return status.state() != v1::RUNNING || internal::IsStudy(job);
}

std::map<std::string, AdmissionVerdict> PlanJobs(const ClusterState& cluster,
                                                 const std::vector<JobToAdmit>& jobs,
                                                 absl::Time now, const AdmissionPolicy& policy) {
  std::vector<Gang> gangs;
  // Per study admitted already: how many trials it has let in so far.
  std::map<std::string, int64_t> admitted_trials;
  // Per admitted study: its released trials that are admitted again (by an
  // earlier verdict its status does not show yet, or by this plan).
  std::map<std::string, std::vector<std::string>> readmitted;
  std::set<std::string> released_gangs;  // trial gangs waiting to be admitted again
  std::map<std::string, const JobToAdmit*> by_key;
  for (const JobToAdmit& entry : jobs) {
    const v1::TrainingJob& job = *entry.job;
    const v1::TrainingJobStatus& status = job.status();
    by_key[entry.key] = &entry;
    const v1::Condition* condition = FindAdmittedCondition(status);
    Gang gang;
    gang.key = entry.key;
    gang.ns = job.metadata().namespace_();
    gang.uid = entry.tie_breaker.empty() ? job.metadata().uid() : entry.tie_breaker;
    gang.priority = entry.priority;
    gang.created = now;
    std::string unparsed;
    if (absl::Time created; !job.metadata().creation_timestamp().empty() &&
                            absl::ParseTime(absl::RFC3339_full, job.metadata().creation_timestamp(),
                                            &created, &unparsed)) {
      gang.created = created;
    }
    const bool pending_admission = entry.pending && entry.pending->admitted();
    gang.admitted = AdmittedByStatus(status) || pending_admission;
    gang.waiting_since = now;
    if (condition != nullptr && condition->status() == "False" &&
        condition->has_last_transition_time()) {
      gang.waiting_since = internal::FromProto(condition->last_transition_time());
    }
    const bool study = internal::IsStudy(job);
    // A queued study waits for its first trial's gang.
    gang.pods_view = &entry.pods_of(study ? "1" : "");
    if (!study || !gang.admitted || (!AdmitsTrialsOneByOne(status) && !pending_admission)) {
      gangs.push_back(std::move(gang));
      continue;
    }
    // An admitted study: each trial is a gang. Those running (their pods not
    // yet bound keep their room), those admitted but not started, and as
    // many more as the study would start now, queued one after another.
    const v1::TrainingJob normalized = Normalize(job);
    const v1::HyperparameterSpec& hp = normalized.spec().training_input().hyperparameters();
    const int64_t started = status.training_output().total_trial_count();
    int64_t admitted = std::max(status.admitted_trial_count(), started);
    if (entry.pending) admitted = std::max(admitted, entry.pending->admitted_trials);
    admitted_trials[entry.key] = admitted;
    const int64_t unused = admitted - started;
    int64_t active = 0;
    auto trial_gang = [&](const std::string& trial, bool trial_admitted) {
      Gang t = gang;
      t.key = absl::StrCat(entry.key, std::string(1, kTrialSeparator), trial);
      t.pods_view = &entry.pods_of(trial);
      t.admitted = trial_admitted;
      if (!absl::SimpleAtoi(trial, &t.trial)) t.trial = 0;
      return t;
    };
    std::vector<std::string>& readmitted_now = readmitted[entry.key];
    for (const v1::HyperparameterOutput& trial : status.training_output().trials()) {
      // A paused trial holds no replicas and no slot until it is resumed,
      // and then it is admitted again as a released one.
      if (IsTerminal(trial.state()) || trial.paused()) continue;
      ++active;
      // A released trial is a queued gang again, unless admitted again by a
      // verdict still to be written.
      const bool released = trial.awaiting_admission() &&
                            (!entry.pending || absl::c_count(entry.pending->readmitted_trials,
                                                             trial.trial_id()) == 0);
      if (trial.awaiting_admission() && !released) readmitted_now.push_back(trial.trial_id());
      gangs.push_back(trial_gang(trial.trial_id(), !released));
      if (released) released_gangs.insert(gangs.back().key);
    }
    for (int64_t k = 1; k <= unused; ++k) {
      gangs.push_back(trial_gang(std::to_string(started + k), true));
    }
    const int64_t wanted = std::min<int64_t>(hp.max_parallel_trials() - active - unused,
                                             hp.max_trials() - started - unused);
    for (int64_t k = 1; k <= wanted; ++k) {
      gangs.push_back(trial_gang(std::to_string(started + unused + k), false));
    }
  }

  std::map<std::string, AdmissionVerdict> verdicts;
  // Admitted studies keep their admission's message; their verdict counts
  // trials.
  for (const auto& [key, count] : admitted_trials) {
    const JobToAdmit& entry = *by_key[key];
    const v1::Condition* condition = FindAdmittedCondition(entry.job->status());
    std::string message = condition != nullptr ? condition->message() : "";
    if (entry.pending && entry.pending->admitted() && !AdmittedByStatus(entry.job->status())) {
      message = entry.pending->message;
    }
    verdicts[key] = {.reason = kAdmittedReason,
                     .message = message,
                     .admitted_trials = count,
                     .readmitted_trials = std::move(readmitted[key])};
  }
  for (const AdmissionDecision& decision : PlanAdmission(cluster, gangs, now, policy)) {
    if (const size_t at = decision.key.rfind(kTrialSeparator);
        at != std::string::npos && by_key.count(decision.key) == 0) {
      if (decision.reason != kAdmittedReason) continue;
      AdmissionVerdict& study = verdicts[decision.key.substr(0, at)];
      if (released_gangs.count(decision.key) != 0) {
        study.readmitted_trials.push_back(decision.key.substr(at + 1));
      } else {
        ++study.admitted_trials;
      }
      continue;
    }
    AdmissionVerdict& verdict = verdicts[decision.key];
    verdict.reason = decision.reason;
    verdict.message = decision.message;
    verdict.position = decision.position;
    const v1::TrainingJob& job = *by_key[decision.key]->job;
    // A study is admitted with its first trial.
    if (decision.reason == kAdmittedReason && internal::IsStudy(job)) {
      verdict.admitted_trials =
          std::max<int64_t>(job.status().admitted_trial_count(),
                            1 + job.status().training_output().total_trial_count());
    }
  }
  // An admission not yet in the job's status stands until it is. (Jobs
  // admitted before, not studies, have nothing more to be told.)
  for (const JobToAdmit& entry : jobs) {
    if (verdicts.count(entry.key) == 0 && entry.pending && entry.pending->admitted() &&
        !AdmittedByStatus(entry.job->status())) {
      verdicts[entry.key] = *entry.pending;
    }
  }
  return verdicts;
}

std::vector<PodPlacement> GangPlacements(const v1::TrainingJob& job, const std::string& ns,
                                         const std::string& trial, const ReconcileOptions& options,
                                         std::vector<absl::Status>* errors) {
  const v1::TrainingJob normalized = Normalize(job);
  const std::vector<api::ReplicaGroup> groups =
      api::ReplicaGroups(normalized.spec().training_input());
  const std::string job_name = JobObjectName(normalized);
  const bool use_chief = normalized.spec().training_input().use_chief_in_tf_config();
  std::vector<PodPlacement> pods;
  for (const api::ReplicaGroup& group : groups) {
    if (group.count <= 0) continue;
    const DesiredReplica first =
        internal::MakeReplica(normalized, groups, group, 0, trial, {}, options);
    absl::StatusOr<PodPlacement> placement = ParsePodPlacement(RenderPod(job, ns, first));
    if (!placement.ok()) {
      errors->push_back(absl::Status(placement.status().code(),
                                     absl::StrCat(first.name, ": ", placement.status().message())));
      continue;
    }
    placement->ns = ns;
    for (int64_t index = 0; index < group.count; ++index) {
      PodPlacement pod = *placement;
      pod.name = ReplicaName(job_name, ReplicaKey{trial, group.role, index}, use_chief);
      pods.push_back(std::move(pod));
    }
  }
  return pods;
}

bool StatusShows(const v1::TrainingJobStatus& status, const AdmissionVerdict& verdict) {
  const v1::Condition* condition = FindAdmittedCondition(status);
  if (condition == nullptr || condition->reason() != verdict.reason ||
      condition->message() != verdict.message || status.queue_position() != verdict.position) {
    return false;
  }
  if (status.admitted_trial_count() < verdict.admitted_trials) return false;
  for (const v1::HyperparameterOutput& trial : status.training_output().trials()) {
    if (trial.awaiting_admission() && absl::c_count(verdict.readmitted_trials, trial.trial_id())) {
      return false;
    }
  }
  return true;
}

}  // namespace kubetrain::core
