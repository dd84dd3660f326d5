#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/ui/job_source.h"
#include "operator/local/job_store.h"

namespace kubetrain::cli::ui {

// The local backend's jobs: the SQLite store under `home` and the replica
// logs beside it (home/jobs/JOB/logs[/trial-N]/TASK.log). Only reads: it
// neither starts the local controller nor writes the store.
class LocalJobSource : public JobSource {
 public:
  // Errors name the store's file.
  static absl::StatusOr<std::unique_ptr<LocalJobSource>> Open(const std::string& home);

  std::string backend() const override { return "local"; }
  std::string location() const override { return store_->path(); }
  absl::StatusOr<std::vector<v1::TrainingJob>> ListJobs() override;
  // No local controller, and a job unfinished for longer than a submit
  // takes to start one: it will not move on.
  std::string Warning(const std::vector<v1::TrainingJob>& jobs, absl::Time now) override;
  absl::StatusOr<JobRecord> GetJob(const std::string& job_id) override;
  // Sorted by trial number, then task.
  absl::StatusOr<std::vector<LogStream>> LogStreams(const std::string& job_id) override;
  absl::StatusOr<LogChunk> ReadLog(const std::string& job_id, const LogStream& stream,
                                   int64_t offset, int max_lines) override;

 private:
  LocalJobSource(std::string home, std::unique_ptr<local::JobStore> store)
      : home_(std::move(home)), store_(std::move(store)) {}

  std::string home_;
  std::unique_ptr<local::JobStore> store_;
};

// Up to `max_lines` whole lines of the log file at `path` from byte `offset`
// (offset < 0: the last `max_lines`), parsed as the local supervisor writes
// them. A missing file is an empty log. At most 1 MiB is read per call.
absl::StatusOr<LogChunk> ReadLogFile(const std::string& path, int64_t offset, int max_lines);

}  // namespace kubetrain::cli::ui
