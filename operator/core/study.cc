#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/defaults.h"
#include "api/validation.h"
#include "operator/core/gang_admission.h"
#include "operator/core/naming.h"
#include "operator/core/reconcile_pass.h"
#include "operator/tuner/search_space.h"

// Tuning studies: trials, their metrics and early stopping, archiving past
// kMaxTrialsInStatus, resumed studies (docs/reconciler.md, "Tuning studies").

namespace kubetrain::core::internal {
namespace {

bool TrialActive(const v1::HyperparameterOutput& t) { return !IsTerminal(t.state()); }

// Active and not paused at a rung: it holds one of maxParallelTrials' slots.
bool TrialHoldsSlot(const v1::HyperparameterOutput& t) { return TrialActive(t) && !t.paused(); }

bool HasObjective(const v1::HyperparameterOutput& t) {
  return t.state() == v1::SUCCEEDED && t.has_final_metric() && t.error_message().empty();
}

// The trial's value at each successive-halving rung it reached.
std::vector<double> RungValues(const v1::HyperparameterOutput& t) {
  std::vector<double> values;
  for (const v1::HyperparameterMetric& m : t.rung_metrics()) values.push_back(m.objective_value());
  return values;
}

tuner::TrialRecord ToRecord(const v1::HyperparameterOutput& t) {
  tuner::TrialRecord record;
  record.trial_id = t.trial_id();
  record.assignment.insert(t.hyperparameters().begin(), t.hyperparameters().end());
  for (const v1::HyperparameterMetric& m : t.all_metrics()) {
    record.curve.emplace_back(m.training_step(), m.objective_value());
  }
  record.rungs = RungValues(t);
  if (t.paused() && TrialActive(t) && t.all_metrics_size() > 0) {
    // Until it earns the next rung, a paused trial is, for the model, what
    // it would be were it never resumed: stopped at its rung.
    record.status = tuner::TrialRecord::Status::kStoppedEarly;
    record.objective = t.all_metrics(t.all_metrics_size() - 1).objective_value();
    return record;
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
  // A trainer that resumed from a checkpoint older than its last report
  // (restarted, or paused at a rung, before it could checkpoint) reports
  // those steps again: its reports from that step on replace the earlier
  // ones, as TensorBoard drops the events a restart orphaned, so no step
  // counts twice.
  std::vector<v1::HyperparameterMetric> kept;
  for (const v1::HyperparameterMetric& m : merged) {
    if (!kept.empty() && m.training_step() < kept.back().training_step()) {
      while (!kept.empty() && kept.back().training_step() >= m.training_step()) kept.pop_back();
    }
    kept.push_back(m);
  }
  merged = std::move(kept);
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
  trial->set_paused(false);  // an ended trial waits for nothing
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
// over, any finished trial may. A finished trial that is archived already
// (the status write that was to drop it was lost) leaves whatever the count,
// its archived copy replaced by this one, so that no trial stays in both.
void CapTrials(Context& c, bool study_over) {
  auto* trials = c.status().mutable_training_output()->mutable_trials();
  if (trials->size() <= kMaxTrialsInStatus && c.archived_and_in_status.empty()) return;
  std::vector<v1::HyperparameterOutput> all(trials->begin(), trials->end());
  std::set<size_t> evict;
  std::vector<size_t> candidates;
  for (size_t i = 0; i < all.size(); ++i) {
    if (TrialActive(all[i])) continue;
    if (c.archived_and_in_status.count(all[i].trial_id()) > 0) {
      evict.insert(i);
    } else if (study_over || HasObjective(all[i])) {
      candidates.push_back(i);
    }
  }
  // Worst first.
  std::sort(candidates.begin(), candidates.end(),
            [&](size_t a, size_t b) { return TrialBefore(c.hp(), all[b], all[a]); });
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

}  // namespace

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

namespace {

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
  // Successive halving compares values at this job's rungs: recorded at
  // other rungs (or under another rule), they are taken again from each
  // trial's reports.
  const v1::EarlyStoppingSpec& stopping = c.hp().early_stopping();
  const bool other_rungs =
      stopping.algorithm() == v1::EarlyStoppingSpec::SUCCESSIVE_HALVING &&
      !tuner::SameRungs(previous.job.spec().training_input().hyperparameters().early_stopping(),
                        stopping);
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
    if (other_rungs) {
      record.rungs = tuner::RungsFromCurve(stopping, record.curve,
                                           t->all_metrics_size() >= kMaxMetricsPerTrial);
    }
    history.trials.push_back(std::move(record));
  }
  return history;
}

}  // namespace

namespace {

// Whether gang admission admits this study's trials one by one: it is on,
// and admitted the study itself (a study that ran before it was turned on,
// or that another admits, starts its trials as before).
bool TrialsAwaitAdmission(Context& c) {
  return c.options.gang_admission && AdmittedElsewhere(c.job).empty() &&
         AdmitsTrialsOneByOne(c.status());
}

// A trial admitted, then holding part of the cluster while a replica it lost
// cannot be placed again: past schedulingPolicy.scheduleTimeoutSeconds its
// gang is released (every replica of the trial deleted, the trial QUEUED and
// awaiting admission), as ReleaseUnplacedGang releases a job's. The study's
// other trials go on; admission lets this one in again (its verdict's
// readmitted_trials) before any new trial. Returns whether the trial waits.
bool ReleaseUnplacedTrial(Context& c, v1::HyperparameterOutput* trial) {
  auto of_trial = [&](const ObservedReplica& r) { return r.key.trial_id == trial->trial_id(); };
  if (!TrialsAwaitAdmission(c)) {
    // Admission was turned off meanwhile: nothing admits it any more.
    trial->set_awaiting_admission(false);
    return false;
  }
  if (!trial->awaiting_admission()) {
    const ObservedReplica* stuck = UnplacedPastTimeout(c, of_trial);
    if (stuck == nullptr) return false;
    const std::string message =
        absl::StrCat(UnplacedReplicaText(c, *stuck),
                     ": the trial's gang was released, and it waits to be admitted again");
    trial->set_awaiting_admission(true);
    trial->set_state(v1::QUEUED);
    c.Emit(EmitEvent::Type::kNormal, kGangReleasedReason, message);
  }
  for (const ObservedReplica& r : c.observed.replicas) {
    if (of_trial(r)) DeleteReplicaOnce(c, r, "trial gang released");
  }
  return true;
}

// ---- Pausing at rungs (earlyStopping.pauseAtRungs) --------------------------

// Deletes a paused trial's replicas. Their Services stay for its resumption;
// a trainer that gets SIGTERM checkpoints before it exits
// (kubetrain-runtime train does), so the next segment starts where it ended.
// The chief (the master, else worker 0) goes first and the others once it
// has stopped: its checkpoint needs the parameter servers, and the workers'
// updates until then are in it.
void DeletePausedReplicas(Context& c, const std::string& trial_id) {
  const ReplicaKey chief_key = ChiefOf(c, trial_id);
  const ObservedReplica* chief = nullptr;
  for (const ObservedReplica& r : c.observed.replicas) {
    if (r.key == chief_key) chief = &r;
  }
  const bool chief_stopped = chief == nullptr || chief->phase == ReplicaPhase::kSucceeded ||
                             chief->phase == ReplicaPhase::kFailed || IsLost(*chief);
  for (const ObservedReplica& r : c.observed.replicas) {
    if (r.key.trial_id != trial_id || (&r != chief && !chief_stopped)) continue;
    DeleteReplicaOnce(c, r, "trial paused", /*with_service=*/false);
  }
}

// Pauses `trial` at the rung it has just reached: it leaves its slot and
// waits, QUEUED, until it earns the next rung (tuner::NextPromotion).
void PauseTrial(Context& c, v1::HyperparameterOutput* trial) {
  trial->set_paused(true);
  trial->set_state(v1::QUEUED);
  DeletePausedReplicas(c, trial->trial_id());
  const v1::HyperparameterMetric& at = trial->rung_metrics(trial->rung_metrics_size() - 1);
  c.Emit(
      EmitEvent::Type::kNormal, "TrialPaused",
      absl::StrCat("trial ", trial->trial_id(), " paused at rung ", trial->rung_metrics_size() - 1,
                   " (step ", at.training_step(), "): objective ",
                   ObjectiveText(at.objective_value()), "; it resumes once among the best 1/",
                   tuner::ReductionFactor(c.hp().early_stopping()), " there"));
}

// Resumes a paused trial that earned its next rung: its replicas are created
// again with the same hyperparameters and output folder, so its trainer
// continues from its latest checkpoint. Under gang admission it is admitted
// again first, as a released trial is.
void ResumeTrial(Context& c, v1::HyperparameterOutput* trial, const std::string& why,
                 const std::map<ReplicaKey, const ObservedReplica*>& index) {
  trial->set_paused(false);
  trial->set_state(v1::QUEUED);
  c.Emit(
      EmitEvent::Type::kNormal, "TrialResumed",
      absl::StrCat("trial ", trial->trial_id(), " ", why, ": resuming from its latest checkpoint"));
  if (TrialsAwaitAdmission(c)) {
    trial->set_awaiting_admission(true);
    return;
  }
  tuner::Assignment assignment(trial->hyperparameters().begin(), trial->hyperparameters().end());
  ReconcileSet(c, trial->trial_id(), assignment, index, /*set_created=*/false);
}

}  // namespace

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

  // Successive halving compares a trial at a rung with every other trial
  // that reached it, whatever became of them.
  const bool halving =
      spec.early_stopping().algorithm() == v1::EarlyStoppingSpec::SUCCESSIVE_HALVING;
  // earlyStopping.pauseAtRungs: trials pause at rungs and wait for a
  // promotion (tuner::NextPromotion) instead of JudgeAtRungs's verdict.
  const bool pausing = halving && spec.early_stopping().pause_at_rungs();
  const bool median_rule = spec.enable_trial_early_stopping() ||
                           spec.early_stopping().algorithm() == v1::EarlyStoppingSpec::MEDIAN;
  // Every trial's recorded rungs (only those: the rule reads no more of the
  // others), built on first use and kept current as this pass records more.
  std::vector<tuner::TrialRecord> rung_records;
  std::map<std::string, size_t> rung_record_of;  // this study's trials
  auto build_rung_records = [&] {
    auto add = [&](const std::string& id, std::vector<double> rungs) {
      tuner::TrialRecord record;
      record.trial_id = id;
      record.rungs = std::move(rungs);
      rung_records.push_back(std::move(record));
    };
    for (const v1::HyperparameterOutput& t : out->trials()) {
      rung_record_of[t.trial_id()] = rung_records.size();
      add(t.trial_id(), RungValues(t));
    }
    for (const v1::HyperparameterOutput& t : c.observed.archived_trials) {
      if (rung_record_of.count(t.trial_id()) == 0) add(t.trial_id(), RungValues(t));
    }
    for (const tuner::TrialRecord& t : resumed.trials) add(t.trial_id, t.rungs);
  };
  // Whether `trial` holds the only slot taken, no trial is left to start,
  // and it leads at the highest rung reached (tuner::LeaderAtTopRung).
  // The trial that leads at the highest rung among this study's trials that
  // still count (not failed or cancelled; not an earlier study's): the one
  // a pausing study that starts nothing more trains to its end.
  auto leader = [&]() -> std::optional<std::string> {
    if (rung_records.empty()) build_rung_records();
    std::set<std::string> counting;
    for (const v1::HyperparameterOutput& t : out->trials()) {
      if (t.state() != v1::FAILED && t.state() != v1::CANCELLED) counting.insert(t.trial_id());
    }
    for (const v1::HyperparameterOutput& t : c.observed.archived_trials) {
      if (HasObjective(t)) counting.insert(t.trial_id());
    }
    std::vector<tuner::TrialRecord> records;
    for (const tuner::TrialRecord& r : rung_records) {
      if (counting.count(r.trial_id) > 0) records.push_back(r);
    }
    return tuner::LeaderAtTopRung(spec, records);
  };
  auto leads_alone = [&](const v1::HyperparameterOutput& trial) {
    if (out->total_trial_count() < spec.max_trials()) return false;
    for (const v1::HyperparameterOutput& t : out->trials()) {
      if (t.trial_id() != trial.trial_id() && TrialHoldsSlot(t)) return false;
    }
    return leader() == trial.trial_id();
  };
  // Records the rungs `trial` reached since the last pass; true when one
  // stops it (only while `may_stop`: a trial that has ended is not stopped)
  // or, when pausing, when it reached one without having earned the next.
  auto record_rungs = [&](v1::HyperparameterOutput* trial, bool may_stop) {
    if (!halving || trial->all_metrics_size() == 0) return false;
    if (rung_records.empty()) build_rung_records();
    // The trial's own entry is among them: it only holds rungs below those
    // judged now, so it never counts.
    const tuner::RungVerdict verdict = tuner::JudgeAtRungs(spec, ToRecord(*trial), rung_records);
    std::vector<double>& recorded = rung_records[rung_record_of.at(trial->trial_id())].rungs;
    for (const auto& [step, value] : verdict.reached) {
      v1::HyperparameterMetric* m = trial->add_rung_metrics();
      m->set_training_step(step);
      m->set_objective_value(value);
      recorded.push_back(value);
    }
    if (!pausing) return may_stop && verdict.stop;
    // A candidate for a pause (decided once every trial's new rungs are
    // recorded: see should_pause).
    return may_stop && !verdict.reached.empty();
  };
  // A trial at its new rung goes on if it has earned the next one (it holds
  // a slot already, so it is not made to wait behind paused trials), or if
  // it leads the study alone at its end (the end of a pausing study, below,
  // would only resume it again).
  auto should_pause = [&](const v1::HyperparameterOutput& trial) {
    return !tuner::NextPromotion(spec, rung_records, {trial.trial_id()}).has_value() &&
           !leads_alone(trial);
  };
  // Whether the trial's chief exited 0.
  auto chief_succeeded = [&](const std::string& trial_id) {
    const ReplicaKey chief = ChiefOf(c, trial_id);
    return std::any_of(c.observed.replicas.begin(), c.observed.replicas.end(), [&](const auto& r) {
      return r.key == chief && r.phase == ReplicaPhase::kSucceeded;
    });
  };
  std::set<std::string> paused;
  for (const v1::HyperparameterOutput& t : out->trials()) {
    if (TrialActive(t) && t.paused()) paused.insert(t.trial_id());
  }

  SetOutcome::Phase best_phase = SetOutcome::Phase::kCreating;
  int replicas_per_trial = 0;
  std::vector<v1::HyperparameterOutput*> pause_candidates;
  for (v1::HyperparameterOutput& trial : *out->mutable_trials()) {
    if (!TrialActive(trial)) continue;
    if (trial.paused()) {
      // What its trainer reported on the way out is kept.
      UpdateTrialMetrics(c, &trial);
      if (FinalReportArrived(c, trial.trial_id()) || chief_succeeded(trial.trial_id())) {
        // It had trained to its end when the pause reached it: completed.
        record_rungs(&trial, /*may_stop=*/false);
        FinishTrialWithObjective(c, &trial, /*stopped_early=*/false);
        paused.erase(trial.trial_id());
        collect_completed();
        continue;
      }
      // Its replicas go (again, if a status write was lost after the pause).
      DeletePausedReplicas(c, trial.trial_id());
      continue;
    }
    if (ReleaseUnplacedTrial(c, &trial)) continue;
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
        record_rungs(&trial, /*may_stop=*/false);
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
    const bool final_report = FinalReportArrived(c, trial.trial_id());
    if (record_rungs(&trial, /*may_stop=*/!final_report)) {
      if (pausing) {
        pause_candidates.push_back(&trial);
      } else {
        FinishTrialWithObjective(c, &trial, /*stopped_early=*/true);
      }
      continue;
    }
    if (median_rule && trial.all_metrics_size() > 0 && !completed.empty() && !final_report) {
      const StopRule rule = c.options.stop_rule ? c.options.stop_rule : tuner::ShouldStopEarly;
      if (rule(spec, ToRecord(trial), completed)) {
        FinishTrialWithObjective(c, &trial, /*stopped_early=*/true);
        collect_completed();
      }
    }
  }

  // Pauses are decided once every trial's new rungs are on record: a trial
  // that reached a rung in this pass may have earned the next one through
  // another that reached it after it.
  for (v1::HyperparameterOutput* trial : pause_candidates) {
    if (!should_pause(*trial)) continue;
    PauseTrial(c, trial);
    paused.insert(trial->trial_id());
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

  // A free slot first resumes a paused trial that earned its next rung,
  // then starts new trials.
  int running = 0;
  for (const v1::HyperparameterOutput& t : out->trials()) running += TrialHoldsSlot(t) ? 1 : 0;
  while (pausing && running < spec.max_parallel_trials() && !paused.empty()) {
    if (rung_records.empty()) build_rung_records();
    const std::optional<tuner::Promotion> promotion =
        tuner::NextPromotion(spec, rung_records, paused);
    if (!promotion) break;
    for (v1::HyperparameterOutput& trial : *out->mutable_trials()) {
      if (trial.trial_id() != promotion->trial_id) continue;
      const v1::HyperparameterMetric& at = trial.rung_metrics(promotion->rung);
      ResumeTrial(
          c, &trial,
          absl::StrCat("earned rung ", promotion->rung + 1, " (objective ",
                       ObjectiveText(at.objective_value()), " at rung ", promotion->rung, ")"),
          index);
    }
    paused.erase(promotion->trial_id);
    ++running;
  }
  int64_t free_slots = std::min<int64_t>(spec.max_parallel_trials() - running,
                                         spec.max_trials() - out->total_trial_count());
  // Under gang admission, a trial starts only once admission has let it
  // (each trial is a gang of its own): the tuner is asked when it starts,
  // with every result that came in while it waited.
  if (TrialsAwaitAdmission(c)) {
    free_slots =
        std::min<int64_t>(free_slots, c.status().admitted_trial_count() - out->total_trial_count());
  }
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

  // The end of a pausing study: no trial runs and none is left to start,
  // so no paused trial can earn a rung any more. The best at the highest
  // rung reached, if it waits there, is resumed to its end (and goes on
  // past the rungs it reaches alone: see leads_alone).
  if (pausing && running == 0 && !paused.empty() &&
      (out->total_trial_count() >= spec.max_trials() || exhausted)) {
    const std::optional<std::string> first = leader();
    for (v1::HyperparameterOutput& trial : *out->mutable_trials()) {
      if (!first || trial.trial_id() != *first || !trial.paused()) continue;
      ResumeTrial(c, &trial,
                  "leads at the highest rung reached, and no trial is left to start: it trains "
                  "to its end",
                  index);
      paused.erase(trial.trial_id());
      ++running;
    }
  }

  if (running == 0 && (out->total_trial_count() >= spec.max_trials() || exhausted)) {
    // Trials still paused have not earned their next rung, and no trial is
    // left to change that: each ends stopped early at its rung.
    for (v1::HyperparameterOutput& t : *out->mutable_trials()) {
      if (!TrialActive(t) || !t.paused()) continue;
      FinishTrialWithObjective(c, &t, /*stopped_early=*/true);
      if (HasObjective(t)) ++with_objective;
    }
    out->set_completed_trial_count(std::max(with_objective, out->completed_trial_count()));
    // The study is over: best first.
    std::vector<v1::HyperparameterOutput> sorted(out->trials().begin(), out->trials().end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](const auto& a, const auto& b) { return TrialBefore(spec, a, b); });
    out->clear_trials();
    for (v1::HyperparameterOutput& t : sorted) *out->add_trials() = std::move(t);
    // Status holds the best trials, but one that a lost status write
    // archived early may be better than the first of them.
    std::optional<v1::HyperparameterOutput> best;
    if (!out->trials().empty()) best = out->trials(0);
    for (const v1::HyperparameterOutput& t : c.observed.archived_trials) {
      if (!best || TrialBefore(spec, t, *best)) best = t;
    }
    CapTrials(c, /*study_over=*/true);
    const std::string ended =
        std::to_string(out->total_trial_count()) + " trials run" +
        (exhausted && out->total_trial_count() < spec.max_trials() ? " (search space exhausted)"
                                                                   : "");
    if (with_objective == 0) {
      FailJob(c, "NoTrialCompleted",
              ended + ", none reported metric '" + spec.hyperparameter_metric_tag() + "'");
    } else {
      SucceedJob(c, ended + "; best trial " + best->trial_id() + ": objective " +
                        ObjectiveText(best->final_metric().objective_value()));
    }
    return;
  }
  CapTrials(c, /*study_over=*/false);
  AdvanceState(c, best_phase, replicas_per_trial);
}

}  // namespace kubetrain::core::internal
