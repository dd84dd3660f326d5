#pragma once

// Pure formatting for the `kubetrain jobs …` commands: the gcloud-shaped job
// resource, its summary tables, log entries, list filters and the progress
// line. No I/O.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"

namespace kubetrain::cli {

// The job as `gcloud ai-platform jobs describe` shows it (Cloud ML's Job
// resource): jobId, createTime, startTime, endTime, state, errorMessage,
// labels, trainingInput (as submitted), outputLocation (kubetrain's: where
// outputs go, status.outputLocation), trainingOutput (each trial with its
// outputPath), and, while the ReplicasWaiting condition holds, `waiting`
// {reason, message, since}: why the replicas do not run, and while gang
// admission holds the job (its Admitted condition is False), `queued` {reason,
// message, since}: why its pods are not created yet (docs/admission.md; not
// Cloud ML fields). int64 fields are
// strings and times RFC 3339 (protobuf's JSON mapping); trials, with
// `archived` ones added back, sorted best first by the study's goal (trials
// without an objective last, by id); hyperparameter values are strings.
nlohmann::json JobResource(const v1::TrainingJob& job,
                           const std::vector<v1::HyperparameterOutput>& archived = {});

// `describe --summarize`: overview, input, output and trials tables.
std::string SummarizeJob(const nlohmann::json& resource);

// A study's early-stopping rule in words, from trainingInput.hyperparameters
// as JobResource prints it: "successive halving (reduction factor 3; rungs
// at report 1, report 3, report 9, ...)", "median rule", or "" for none.
std::string EarlyStoppingRule(const nlohmann::json& hp);

// Under successive halving, how many of `trials` (JobResource's) stopped at
// each rung: "rung 0 (report 1): 5, rung 1 (report 3): 2", or "none"; ""
// under another rule.
std::string StoppedAtEachRung(const nlohmann::json& hp, const nlohmann::json& trials);

// Trials best first for `goal` (trials without a final metric last, by id).
void SortTrials(std::vector<v1::HyperparameterOutput>& trials,
                v1::HyperparameterSpec::GoalType goal);

// Log severity of a replica's output line: ERROR/WARNING when the message
// says so, or, on stderr, when it is a tool's or Python's error report
// ("python3: Error while ...", "ValueError: ..."); else INFO. Not every
// stderr line is an error: TensorFlow and this runtime log progress there.
std::string LogSeverity(bool from_stderr, const std::string& message);

// The trial a service event is about ("trial 3: objective ..." -> "3"), or
// "" for an event about the whole job.
std::string EventTrial(const std::string& message);

// One `stream-logs` line: severity, time (UTC), task, trial, message,
// tab-separated as gcloud prints them.
std::string FormatLogEntry(const std::string& severity, double unix_seconds,
                           const std::string& task, const std::string& trial,
                           const std::string& message);

// `jobs list --filter`: space-separated terms, all of which must hold:
// `state=S` (or status), `jobId=NAME`, `jobId:TEXT` (contains),
// `labels.KEY=VALUE`; '=' compares exactly (case-insensitive for state),
// ':' by substring. Errors name the term.
using JobPredicate = std::function<bool(const v1::TrainingJob&)>;
absl::StatusOr<JobPredicate> ParseJobFilter(const std::string& filter);

// One Kubernetes Event about a job or one of its replicas, as `jobs describe`
// lists them.
struct JobEvent {
  std::string type;    // Normal, Warning
  std::string reason;  // ReplicasCreated, FailedScheduling...
  std::string object;  // "trainingjob/mnist", "pod/mnist-master-0"
  std::string source;  // kubetrain-operator, default-scheduler, kubelet...
  std::string message;
  int count = 1;  // times seen, first_seen .. last_seen
  absl::Time first_seen = absl::InfinitePast();
  absl::Time last_seen = absl::InfinitePast();
};

// Kubernetes' duration.HumanDuration, as kubectl prints ages: "45s", "5m3s",
// "3h10m", "12d".
std::string HumanDuration(absl::Duration d);

// The events as `kubectl describe` ends: a table of type, reason, age ("2m",
// or "10s (x3 over 5m)" for a repeated event), source, object and message,
// oldest first; "<none>" when there are none. Every line starts with
// `line_prefix` ("# " keeps `describe`'s YAML valid).
std::string FormatEvents(const std::vector<JobEvent>& events, absl::Time now,
                         const std::string& line_prefix);

// The events for `describe --format json`: type, reason, object, source,
// message, count, firstTimestamp and lastTimestamp (RFC 3339) each.
nlohmann::json EventsJson(const std::vector<JobEvent>& events);

// A tuning job's progress: "trials: 3/10 completed, 2 running, 0 failed;
// best objective 0.8731 (trial 2)". Empty for jobs without a study.
std::string ProgressLine(const v1::TrainingJob& job);

}  // namespace kubetrain::cli
