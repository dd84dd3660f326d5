#include "cli/ui/ui_api.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "api/scale_tiers.h"
#include "api/validation.h"
#include "cli/jobs_format.h"

namespace kubetrain::cli::ui {
namespace {

nlohmann::json ToJson(const google::protobuf::Message& message) {
  return nlohmann::json::parse(api::EncodeJson(message), nullptr, false);
}

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

bool IsTuning(const v1::TrainingJob& job) {
  return job.spec().training_input().hyperparameters().params_size() > 0;
}

// Start to end, or to `now` while the job has no end; absent before it started.
void AddDuration(const v1::TrainingJobStatus& status, absl::Time now, nlohmann::json* out) {
  if (!status.has_start_time()) return;
  const absl::Time start = FromProto(status.start_time());
  const absl::Time end = status.has_end_time() ? FromProto(status.end_time()) : now;
  (*out)["durationSeconds"] = std::max(0.0, absl::ToDoubleSeconds(end - start));
}

std::string GoalName(const v1::HyperparameterSpec& hp) {
  return hp.goal() == v1::HyperparameterSpec::MINIMIZE ? "MINIMIZE" : "MAXIMIZE";
}

// The first trial of a describe resource's trials (sorted best first) that
// has an objective; null when none has.
nlohmann::json BestTrial(const nlohmann::json& resource) {
  const nlohmann::json* trials = nullptr;
  if (resource.contains("trainingOutput") && resource["trainingOutput"].contains("trials")) {
    trials = &resource["trainingOutput"]["trials"];
  }
  if (trials == nullptr) return nullptr;
  for (const nlohmann::json& t : *trials) {
    if (t.contains("finalMetric") && t["finalMetric"].contains("objectiveValue")) {
      return {{"trialId", t.value("trialId", "")},
              {"objectiveValue", t["finalMetric"]["objectiveValue"]},
              {"trainingStep", t["finalMetric"].value("trainingStep", nlohmann::json())}};
    }
  }
  return nullptr;
}

nlohmann::json Replicas(const v1::TrainingJob& job, nlohmann::json* spec_errors) {
  // Runtimes are not checked: the job's was, where it runs (a cluster's
  // catalog is its operator's).
  const std::vector<api::FieldError> errors =
      api::Validate(job, {.require_name = false, .runtimes = nullptr});
  if (!errors.empty()) {
    *spec_errors = nlohmann::json::array();
    for (const api::FieldError& e : errors) spec_errors->push_back(e.ToString());
    return nullptr;
  }
  v1::TrainingJob defaulted = job;
  api::ApplyDefaults(&defaulted);
  nlohmann::json groups = nlohmann::json::array();
  for (const api::ReplicaGroup& group : api::ReplicaGroups(defaulted.spec().training_input())) {
    nlohmann::json g = {{"role", std::string(api::RoleName(group.role))},
                        {"count", group.count},
                        {"machineType", group.resources.machine_type}};
    if (group.resources.gpus > 0) g["gpus"] = group.resources.gpus;
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace

absl::StatusOr<std::optional<v1::State>> ParseStateFilter(const std::string& text) {
  if (text.empty()) return std::optional<v1::State>();
  v1::State state;
  if (!v1::State_Parse(absl::AsciiStrToUpper(text), &state) || state == v1::STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("state: unknown job state \"", text,
                     "\" (QUEUED, PREPARING, RUNNING, SUCCEEDED, FAILED, CANCELLING, CANCELLED)"));
  }
  return std::optional<v1::State>(state);
}

nlohmann::json JobListJson(const std::vector<v1::TrainingJob>& jobs, std::optional<v1::State> state,
                           absl::Time now) {
  nlohmann::json list = nlohmann::json::array();
  for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {  // newest first, as `jobs list`
    const v1::TrainingJob& job = *it;
    const v1::State job_state =
        job.status().state() == v1::STATE_UNSPECIFIED ? v1::QUEUED : job.status().state();
    if (state.has_value() && job_state != *state) continue;
    const nlohmann::json resource = JobResource(job);
    nlohmann::json item = nlohmann::json::object();
    for (const char* key :
         {"jobId", "state", "createTime", "startTime", "endTime", "errorMessage"}) {
      if (resource.contains(key)) item[key] = resource[key];
    }
    AddDuration(job.status(), now, &item);
    if (IsTuning(job)) {
      const v1::HyperparameterSpec& hp = job.spec().training_input().hyperparameters();
      item["goal"] = GoalName(hp);
      item["trials"] = {{"completed", job.status().training_output().completed_trial_count()},
                        {"max", api::EffectiveMaxTrials(hp)}};
      const nlohmann::json best = BestTrial(resource);
      if (!best.is_null()) {
        item["bestTrialId"] = best["trialId"];
        item["bestObjective"] = best["objectiveValue"];
      }
    }
    list.push_back(std::move(item));
  }
  return {{"jobs", std::move(list)}};
}

nlohmann::json JobPageJson(const JobRecord& record, absl::Time now) {
  const v1::TrainingJob& job = record.job;
  const v1::TrainingJobStatus& status = job.status();
  nlohmann::json page = nlohmann::json::object();
  page["job"] = JobResource(job, record.archived);

  v1::TrainingJobStatus kept;
  *kept.mutable_conditions() = status.conditions();
  *kept.mutable_replica_statuses() = status.replica_statuses();
  kept.set_restart_count(status.restart_count());
  nlohmann::json status_json = ToJson(kept);
  if (!status_json.is_object()) status_json = nlohmann::json::object();
  if (!status_json.contains("conditions")) status_json["conditions"] = nlohmann::json::array();
  if (!status_json.contains("replicaStatuses")) {
    status_json["replicaStatuses"] = nlohmann::json::object();
  }
  page["status"] = std::move(status_json);
  AddDuration(status, now, &page);

  nlohmann::json spec_errors;
  page["replicas"] = Replicas(job, &spec_errors);
  if (!spec_errors.is_null()) page["specErrors"] = std::move(spec_errors);

  if (IsTuning(job)) {
    const v1::HyperparameterSpec& hp = job.spec().training_input().hyperparameters();
    int running = 0, paused = 0, failed = 0, stopped_early = 0;
    auto count = [&](const v1::HyperparameterOutput& t) {
      const bool active =
          t.state() == v1::QUEUED || t.state() == v1::PREPARING || t.state() == v1::RUNNING;
      if (active && t.paused()) {
        ++paused;
      } else if (active) {
        ++running;
      }
      if (t.state() == v1::FAILED) ++failed;
      if (t.is_trial_stopped_early()) ++stopped_early;
    };
    for (const v1::HyperparameterOutput& t : status.training_output().trials()) count(t);
    for (const v1::HyperparameterOutput& t : record.archived) {
      const auto& in_status = status.training_output().trials();
      if (std::none_of(in_status.begin(), in_status.end(), [&](const v1::HyperparameterOutput& s) {
            return s.trial_id() == t.trial_id();
          })) {
        count(t);
      }
    }
    const nlohmann::json& resource = page["job"];
    const nlohmann::json hp_json = resource.value("trainingInput", nlohmann::json::object())
                                       .value("hyperparameters", nlohmann::json::object());
    const nlohmann::json trials = resource.value("trainingOutput", nlohmann::json::object())
                                      .value("trials", nlohmann::json::array());
    page["study"] = {{"goal", GoalName(hp)},
                     {"earlyStopping", EarlyStoppingRule(hp_json)},
                     {"stoppedAtEachRung", StoppedAtEachRung(hp_json, trials)},
                     {"completed", status.training_output().completed_trial_count()},
                     {"max", api::EffectiveMaxTrials(hp)},
                     {"running", running},
                     {"paused", paused},
                     {"failed", failed},
                     {"stoppedEarly", stopped_early},
                     {"best", BestTrial(page["job"])}};
  }

  // As `jobs describe --format json` prints them, each with the trial it is
  // about.
  nlohmann::json events = EventsJson(record.events);
  for (size_t i = 0; i < record.events.size(); ++i) {
    events[i]["trial"] = EventTrial(record.events[i].message);
  }
  page["events"] = std::move(events);
  if (!record.events_error.empty()) page["eventsError"] = record.events_error;
  return page;
}

nlohmann::json LogStreamsJson(const std::vector<LogStream>& streams) {
  nlohmann::json list = nlohmann::json::array();
  for (const LogStream& s : streams) list.push_back({{"trial", s.trial}, {"task", s.task}});
  return {{"streams", std::move(list)}};
}

nlohmann::json LogChunkJson(const LogChunk& chunk) {
  nlohmann::json lines = nlohmann::json::array();
  for (const LogLine& line : chunk.lines) {
    const absl::Time t = absl::FromUnixMicros(static_cast<int64_t>(line.time * 1e6));
    lines.push_back({{"time", line.time > 0 ? Rfc3339(t) : ""},
                     {"severity", line.severity},
                     {"message", line.message}});
  }
  return {{"lines", std::move(lines)},
          {"nextOffset", chunk.next_offset},
          {"truncated", chunk.truncated}};
}

}  // namespace kubetrain::cli::ui
