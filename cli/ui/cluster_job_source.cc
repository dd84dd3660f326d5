#include "cli/ui/cluster_job_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/cluster_logs.h"
#include "cli/jobs_format.h"

namespace kubetrain::cli::ui {
namespace {

// "<RFC 3339 time> <message>", as the kubelet stamps each line: as `jobs
// stream-logs` reads it (the API merges stdout and stderr, so severity is
// judged as if from stderr).
LogLine ToStampedLogLine(absl::string_view text) {
  LogLine line;
  const size_t space = text.find(' ');
  absl::Time time;
  std::string error;
  if (space != absl::string_view::npos &&
      absl::ParseTime(absl::RFC3339_full, std::string(text.substr(0, space)), &time, &error)) {
    line.time = absl::ToDoubleSeconds(time - absl::UnixEpoch());
    text.remove_prefix(space + 1);
  }
  line.message = std::string(text);
  line.severity = LogSeverity(/*from_stderr=*/true, line.message);
  return line;
}

}  // namespace

absl::StatusOr<JobRecord> ClusterJobSource::GetJob(const std::string& job_id) {
  JobRecord record;
  absl::StatusOr<v1::TrainingJob> job = jobs_->Get(job_id);
  if (!job.ok()) return job.status();
  record.job = *std::move(job);
  absl::StatusOr<std::vector<JobEvent>> events = jobs_->Events(record.job);
  if (events.ok()) {
    record.events = *std::move(events);
  } else {
    record.events_error = std::string(events.status().message());
  }
  return record;
}

absl::StatusOr<std::vector<LogStream>> ClusterJobSource::LogStreams(const std::string& job_id) {
  absl::StatusOr<std::vector<ReplicaPod>> pods = jobs_->ReplicaPods(job_id);
  if (!pods.ok()) return pods.status();
  std::vector<LogStream> streams;
  for (const ReplicaPod& pod : *pods) streams.push_back({pod.trial, pod.task});
  SortLogStreams(streams);
  streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
  return streams;
}

absl::StatusOr<LogChunk> ClusterJobSource::ReadLog(const std::string& job_id,
                                                   const LogStream& stream, int64_t offset,
                                                   int max_lines) {
  // Only a pod the job's listing names is read: no name comes from the request.
  absl::StatusOr<std::vector<ReplicaPod>> pods = jobs_->ReplicaPods(job_id);
  if (!pods.ok()) return pods.status();
  auto pod = std::find_if(pods->begin(), pods->end(), [&](const ReplicaPod& p) {
    return p.task == stream.task && p.trial == stream.trial;
  });
  if (pod == pods->end()) {
    return absl::NotFoundError(absl::StrCat("job [", job_id, "] has no log of task \"", stream.task,
                                            "\"", stream.trial.empty() ? "" : " in trial \"",
                                            stream.trial, stream.trial.empty() ? "" : "\""));
  }
  absl::StatusOr<std::string> log = jobs_->ReplicaLog(pod->name);
  // A container that has not started yet (400) has written nothing.
  if (absl::IsInvalidArgument(log.status())) return LogChunk();
  if (!log.ok()) return log.status();
  const int64_t size = static_cast<int64_t>(log->size());
  // A restarted container's log starts over, shorter: a tail then.
  const bool tail = offset < 0 || offset > size;
  const int64_t start = tail ? std::max<int64_t>(0, size - kMaxLogReadBytes) : offset;
  const absl::string_view data = absl::string_view(*log).substr(
      static_cast<size_t>(start),
      static_cast<size_t>(std::min<int64_t>(size - start, kMaxLogReadBytes)));
  return ChunkOfLog(data, start, tail, max_lines, ToStampedLogLine);
}

}  // namespace kubetrain::cli::ui
