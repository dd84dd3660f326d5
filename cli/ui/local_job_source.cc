#include "cli/ui/local_job_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/jobs_format.h"
#include "cli/local_backend.h"
#include "operator/core/reconciler.h"
#include "operator/local/controller.h"
#include "operator/local/process_launcher.h"

namespace kubetrain::cli::ui {
namespace {

// How long a submitted job may wait for the local controller its submit
// starts before the pages say that none runs.
constexpr absl::Duration kControllerStartGrace = absl::Seconds(10);

LogLine ToLogLine(absl::string_view text) {
  local::LogLine parsed = local::ParseLogLine(std::string_view(text.data(), text.size()));
  return LogLine{parsed.time, LogSeverity(parsed.stderr, parsed.message), parsed.message};
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalJobSource>> LocalJobSource::Open(const std::string& home) {
  absl::StatusOr<std::unique_ptr<local::JobStore>> store = OpenLocalStore(home);
  if (!store.ok()) return store.status();
  return std::unique_ptr<LocalJobSource>(new LocalJobSource(home, *std::move(store)));
}

absl::StatusOr<std::vector<v1::TrainingJob>> LocalJobSource::ListJobs() {
  return store_->ListJobs();
}

std::string LocalJobSource::Warning(const std::vector<v1::TrainingJob>& jobs, absl::Time now) {
  // A job just submitted waits a moment for the controller its submit starts.
  const bool unfinished = std::any_of(jobs.begin(), jobs.end(), [now](const v1::TrainingJob& job) {
    const absl::Time created = absl::FromUnixSeconds(job.status().create_time().seconds());
    return !core::IsTerminal(job.status().state()) && now - created > kControllerStartGrace;
  });
  if (!unfinished || local::ControllerLock::Held(home_)) return "";
  return "No local controller is running, so unfinished jobs do not move on: start one with "
         "`kubetrain local serve` (any `kubetrain jobs` command with --local starts one too).";
}

absl::StatusOr<JobRecord> LocalJobSource::GetJob(const std::string& job_id) {
  JobRecord record;
  absl::StatusOr<v1::TrainingJob> job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  record.job = *std::move(job);
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> archived = store_->ArchivedTrials(job_id);
  if (!archived.ok()) return archived.status();
  record.archived = *std::move(archived);
  absl::StatusOr<std::vector<local::StoredEvent>> events = store_->Events(job_id);
  if (events.ok()) {
    for (const local::StoredEvent& e : *events) {
      JobEvent event;
      event.type = e.type;
      event.reason = e.reason;
      event.message = e.message;
      event.first_seen = event.last_seen = e.time;
      record.events.push_back(std::move(event));
    }
  } else {
    record.events_error = std::string(events.status().message());
  }
  return record;
}

absl::StatusOr<std::vector<LogStream>> LocalJobSource::LogStreams(const std::string& job_id) {
  // NotFound for a job that does not exist, rather than an empty list.
  if (absl::StatusOr<v1::TrainingJob> job = store_->GetJob(job_id); !job.ok()) return job.status();
  std::vector<LogStream> streams;
  const std::filesystem::path logs = local::JobDir(home_, job_id) + "/logs";
  std::error_code ec;
  if (!std::filesystem::exists(logs, ec)) return streams;
  for (auto it = std::filesystem::recursive_directory_iterator(logs, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->path().extension() != ".log") continue;
    LogStream stream;
    stream.task = it->path().stem().string();
    const std::filesystem::path parent = it->path().parent_path();
    if (parent != logs) {
      const std::string folder = parent.filename().string();
      if (folder.rfind("trial-", 0) != 0 || parent.parent_path() != logs) continue;
      stream.trial = folder.substr(6);
    }
    streams.push_back(std::move(stream));
  }
  if (ec) {
    return absl::InternalError(absl::StrCat("reading ", logs.string(), ": ", ec.message()));
  }
  SortLogStreams(streams);
  return streams;
}

absl::StatusOr<LogChunk> LocalJobSource::ReadLog(const std::string& job_id, const LogStream& stream,
                                                 int64_t offset, int max_lines) {
  absl::StatusOr<std::vector<LogStream>> streams = LogStreams(job_id);
  if (!streams.ok()) return streams.status();
  if (std::find(streams->begin(), streams->end(), stream) == streams->end()) {
    return absl::NotFoundError(absl::StrCat("job [", job_id, "] has no log of task \"", stream.task,
                                            "\"", stream.trial.empty() ? "" : " in trial \"",
                                            stream.trial, stream.trial.empty() ? "" : "\""));
  }
  return ReadLogFile(local::LogPath(home_, job_id, stream.trial, stream.task), offset, max_lines);
}

absl::StatusOr<LogChunk> ReadLogFile(const std::string& path, int64_t offset, int max_lines) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return LogChunk();  // nothing written yet
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("cannot open ", path));
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  // A log never shrinks; an offset past its end (another file of the same
  // name) starts over with a tail.
  const bool tail = offset < 0 || offset > size;
  int64_t start = tail ? std::max<int64_t>(0, size - kMaxLogReadBytes) : offset;
  const int64_t length = std::min<int64_t>(size - start, kMaxLogReadBytes);
  std::string data(static_cast<size_t>(length), '\0');
  in.seekg(start);
  in.read(data.data(), length);
  data.resize(static_cast<size_t>(in.gcount()));
  return ChunkOfLog(data, start, tail, max_lines, ToLogLine);
}

}  // namespace kubetrain::cli::ui
