#include "cli/ui/cluster_job_source.h"

#include "absl/strings/str_cat.h"
#include "api/validation.h"

namespace kubetrain::cli::ui {
namespace {

absl::Status NoLogs(const std::string& namespace_name, const std::string& job_id) {
  return absl::UnimplementedError(
      absl::StrCat("replica logs are shown for the local backend; on a cluster read them with "
                   "`kubectl logs -n ",
                   namespace_name, " -l kubetrain.io/job-name=", api::KubernetesName(job_id), "`"));
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
  return NoLogs(jobs_->namespace_name(), job_id);
}

absl::StatusOr<LogChunk> ClusterJobSource::ReadLog(const std::string& job_id, const LogStream&,
                                                   int64_t, int) {
  return NoLogs(jobs_->namespace_name(), job_id);
}

}  // namespace kubetrain::cli::ui
