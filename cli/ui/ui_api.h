#pragma once

// The JSON documents behind `kubetrain ui`'s pages (docs/ui.md describes
// them field by field). Pure: values in, JSON out; no I/O. Every value taken
// from a job is passed through as data (JSON strings); the pages put them in
// the DOM as text, never as markup.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/ui/job_source.h"
#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"

namespace kubetrain::cli::ui {

// GET /api/jobs: {"jobs": [...]}, newest first, each the job's jobId, state,
// createTime, startTime, endTime and errorMessage as `jobs describe` prints
// them, plus durationSeconds (start to end, or to `now` while running; absent
// before the start) and, for tuning jobs, "trials": {"completed", "max"},
// "goal" and the best trial in status ("bestTrialId", "bestObjective").
// `state` (nullopt: all) keeps only jobs in that state.
nlohmann::json JobListJson(const std::vector<v1::TrainingJob>& jobs, std::optional<v1::State> state,
                           absl::Time now);

// GET /api/jobs/ID: {"job": the job as `jobs describe --format json` prints
// it (trials with archived ones, best first), "status": conditions,
// replicaStatuses, restartCount, "durationSeconds", "replicas": the replica
// groups (role, count, machineType) or "specErrors" when the spec is not
// valid, "study" (tuning jobs: goal, completed, max, running, failed, best),
// "events" (as `jobs describe --format json` prints them: type, reason,
// object, source, message, count, firstTimestamp, lastTimestamp; plus the
// trial each is about), "eventsError"}.
nlohmann::json JobPageJson(const JobRecord& record, absl::Time now);

// GET /api/jobs/ID/logs: {"streams": [{"trial", "task"}]}.
nlohmann::json LogStreamsJson(const std::vector<LogStream>& streams);

// GET /api/jobs/ID/log: {"lines": [{"time", "severity", "message"}],
// "nextOffset", "truncated"}; time RFC 3339 UTC, "" when unknown.
nlohmann::json LogChunkJson(const LogChunk& chunk);

// A ?state= filter: "" is every state; otherwise a State name, any case.
// InvalidArgument names the parameter and the allowed values.
absl::StatusOr<std::optional<v1::State>> ParseStateFilter(const std::string& text);

}  // namespace kubetrain::cli::ui
