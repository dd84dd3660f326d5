#pragma once

// Where `kubetrain ui` reads jobs from: the local backend's store or the
// cluster of the kubeconfig. Read-only by contract: nothing here creates,
// changes or deletes a job, an event or a log.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cli/jobs_format.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::cli::ui {

// What a job page shows, read together.
struct JobRecord {
  v1::TrainingJob job;  // metadata.name is the job id the user knows
  // Trials that left status (the local backend keeps them apart).
  std::vector<v1::HyperparameterOutput> archived;
  // The job's events, oldest first, as `jobs describe` reads them (on a
  // cluster also those of the job's pods).
  std::vector<cli::JobEvent> events;
  // Why `events` could not be read (say, RBAC denies listing events), or "".
  std::string events_error;
};

// One replica log: a task ("master-replica-0") of a trial ("" outside
// studies).
struct LogStream {
  std::string trial;
  std::string task;
  bool operator==(const LogStream& other) const {
    return trial == other.trial && task == other.task;
  }
};

struct LogLine {
  double time = 0;       // unix seconds; 0 when the line carries none
  std::string severity;  // INFO, WARNING, ERROR (as `jobs stream-logs` prints)
  std::string message;
};

// Lines of one log from a byte offset on. Only whole lines: a line still
// being written comes with the next read.
struct LogChunk {
  std::vector<LogLine> lines;
  int64_t next_offset = 0;  // where the next read starts
  bool truncated = false;   // older lines were left out (a tail, or a large gap)
};

// A read never takes more than this from a log, so a huge log costs a
// bounded amount per request.
inline constexpr int64_t kMaxLogReadBytes = 1 << 20;

// What JobSource::ReadLog answers from a log of `size` bytes whose bytes
// from `start` on are `data` (at most kMaxLogReadBytes of them): whole lines
// only, each read by `parse`. `tail` (the request's offset was < 0, or past
// the end of a log that has started over) asks for the last `max_lines`
// lines of `data`, which then starts at max(0, size - kMaxLogReadBytes);
// else `data` starts at the request's offset. Pure: both backends' logs go
// through it.
LogChunk ChunkOfLog(absl::string_view data, int64_t start, bool tail, int max_lines,
                    const std::function<LogLine(absl::string_view)>& parse);

// Sorts `streams` as LogStreams lists them: by trial number (a trial id that
// is not a number, "" outside studies, first), then trial id, then task.
void SortLogStreams(std::vector<LogStream>& streams);

// Calls come from one thread at a time (UiServer serialises them), so an
// implementation need not be thread-safe.
class JobSource {
 public:
  virtual ~JobSource() = default;

  // "local" or "cluster".
  virtual std::string backend() const = 0;
  // Where the jobs come from, for the page header: the store's file, or the
  // cluster's server and namespace.
  virtual std::string location() const = 0;

  // Something the user should know about the backend itself, shown above
  // the jobs (say, that no local controller runs to move unfinished jobs
  // on); "" when all is well. `jobs` is what ListJobs returned.
  virtual std::string Warning(const std::vector<v1::TrainingJob>& jobs, absl::Time now) {
    return "";
  }

  // Every job, oldest first.
  virtual absl::StatusOr<std::vector<v1::TrainingJob>> ListJobs() = 0;
  // NotFound names the job.
  virtual absl::StatusOr<JobRecord> GetJob(const std::string& job_id) = 0;

  // The job's replica logs. Unimplemented where this backend keeps none.
  virtual absl::StatusOr<std::vector<LogStream>> LogStreams(const std::string& job_id) = 0;
  // Up to `max_lines` whole lines of `stream` from byte `offset`; offset < 0
  // asks for the last `max_lines` lines. NotFound when the job has no such
  // stream: a stream is only read when LogStreams lists it, so no path is
  // ever built from what a request says.
  virtual absl::StatusOr<LogChunk> ReadLog(const std::string& job_id, const LogStream& stream,
                                           int64_t offset, int max_lines) = 0;
};

}  // namespace kubetrain::cli::ui
