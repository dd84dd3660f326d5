// The local backend of `kubetrain jobs`: jobs in $KUBETRAIN_HOME/jobs.db,
// run by the local controller process, their logs in files under the job's
// folder.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/scale_tiers.h"
#include "cli/jobs_backend.h"
#include "cli/local_backend.h"
#include "google/protobuf/util/time_util.h"
#include "operator/core/reconciler.h"
#include "operator/local/container_replica.h"

namespace kubetrain::cli {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(300);

std::string RandomUid() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
  const uint64_t a = rng(), b = rng();
  char text[40];
  snprintf(text, sizeof(text), "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
           static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
           static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
           static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return text;
}

// One local job's log files and events, printed as they grow, in time order.
struct LogFollower {
  std::string home;
  std::string job;
  std::string task_filter;                        // "" all
  std::string trial_filter;                       // "" all
  std::map<std::string, std::streamoff> offsets;  // per log file
  size_t events_shown = 0;

  // Prints what was added since the last call, in time order.
  void Poll(local::JobStore& store, std::ostream& out) {
    struct Entry {
      double time;
      std::string line;
    };
    std::vector<Entry> entries;
    if (task_filter.empty() || task_filter == "service") {
      absl::StatusOr<std::vector<local::StoredEvent>> events = store.Events(job);
      if (events.ok()) {
        for (size_t i = events_shown; i < events->size(); ++i) {
          const local::StoredEvent& e = (*events)[i];
          // With --trial, another trial's events are left out; the job's own stay.
          const std::string trial = EventTrial(e.message);
          if (!trial_filter.empty() && !trial.empty() && trial != trial_filter) continue;
          const double t = absl::ToDoubleSeconds(e.time - absl::UnixEpoch());
          entries.push_back({t, FormatLogEntry(e.type == "Warning" ? "WARNING" : "INFO", t,
                                               "service", trial, e.reason + ": " + e.message)});
        }
        events_shown = events->size();
      }
    }
    const std::filesystem::path logs = local::JobDir(home, job) + "/logs";
    std::error_code ec;
    if (std::filesystem::exists(logs, ec)) {
      for (const auto& file : std::filesystem::recursive_directory_iterator(logs, ec)) {
        if (!file.is_regular_file() || file.path().extension() != ".log") continue;
        const std::string task = file.path().stem().string();
        std::string trial;
        const std::string parent = file.path().parent_path().filename().string();
        if (parent.rfind("trial-", 0) == 0) trial = parent.substr(6);
        if (!task_filter.empty() && task != task_filter) continue;
        if (!trial_filter.empty() && trial != trial_filter) continue;
        std::ifstream in(file.path(), std::ios::binary);
        std::streamoff& offset = offsets[file.path().string()];
        in.seekg(offset);
        std::string line;
        while (std::getline(in, line)) {
          if (in.eof()) break;  // a line still being written: next time
          offset = in.tellg();
          local::LogLine parsed = local::ParseLogLine(line);
          entries.push_back(
              {parsed.time, FormatLogEntry(LogSeverity(parsed.stderr, parsed.message), parsed.time,
                                           task, trial, parsed.message)});
        }
      }
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) { return a.time < b.time; });
    for (const Entry& e : entries) out << e.line << "\n";
    out.flush();
  }
};

// Follows what `options` asks for until the job is finished and its
// replicas are gone. Returns the final job.
absl::StatusOr<v1::TrainingJob> FollowJob(local::JobStore& store, const std::string& home,
                                          const std::string& name, const FollowOptions& options,
                                          std::ostream& out) {
  const bool logs = options.logs;
  LogFollower follower{home, name, options.task_filter, options.trial_filter, {}, 0};
  std::string last_progress;
  const bool tty = isatty(STDOUT_FILENO) && &out == &std::cout;
  for (;;) {
    absl::StatusOr<v1::TrainingJob> job = store.GetJob(name);
    if (!job.ok()) return job.status();
    const bool finished = core::IsTerminal(job->status().state());
    if (!finished) {
      // Without a controller the job would never move on, and this loop
      // never end.
      if (absl::Status s = EnsureLocalController(home); !s.ok()) {
        return absl::UnavailableError(
            absl::StrCat("job [", name, "] is ", v1::State_Name(job->status().state()),
                         " but no local controller is running and none could be started (",
                         s.message(), "); run `kubetrain local serve`"));
      }
    }
    bool replicas_left = false;
    if (finished) {
      local::RealProcessLauncher launcher;
      absl::StatusOr<bool> running = local::AnyReplicaRunning(store, launcher, name);
      replicas_left = !running.ok() || *running;
    }
    if (logs) follower.Poll(store, out);
    const std::string line = options.progress ? ProgressLine(*job) : "";
    if (!line.empty() && line != last_progress) {
      if (tty && !logs) {
        out << "\r\033[K" << line << std::flush;  // one line, rewritten
      } else {
        out << "[kubetrain] " << line << "\n" << std::flush;
      }
      last_progress = line;
    }
    if (finished && !replicas_left) {
      if (logs) follower.Poll(store, out);
      if (tty && !logs && !last_progress.empty()) out << "\n";
      return job;
    }
    absl::SleepFor(options.poll_interval.value_or(kPollInterval));
  }
}

class LocalBackend : public JobsBackend {
 public:
  LocalBackend() : home_(KubetrainHome()) {}

  absl::Status Open() override {
    absl::StatusOr<std::unique_ptr<local::JobStore>> store = OpenLocalStore(home_);
    if (!store.ok()) return store.status();
    store_ = *std::move(store);
    return absl::OkStatus();
  }

  absl::Status AttachPackage(const UserPackage& package, v1::TrainingJob& job) override {
    // On PYTHONPATH, so that `-m pkg.module` resolves.
    v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
    input->clear_package_uris();
    input->add_package_uris(package.search_path);
    return absl::OkStatus();
  }

  absl::Status Submit(v1::TrainingJob job, bool streaming, std::ostream& out) override {
    if (absl::Status s = RunsOnThisMachine(job); !s.ok()) return s;
    const std::string& name = job.metadata().name();
    const absl::Time now = absl::Now();
    job.mutable_metadata()->set_uid(RandomUid());
    job.mutable_metadata()->set_creation_timestamp(
        absl::FormatTime(absl::RFC3339_sec, now, absl::UTCTimeZone()));
    job.mutable_status()->set_state(v1::QUEUED);
    *job.mutable_status()->mutable_create_time() =
        google::protobuf::util::TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(now));
    if (absl::Status s = store_->CreateJob(job); !s.ok()) return s;
    if (absl::Status s = EnsureLocalController(home_); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("job [", name, "] is recorded but no local controller could be started (",
                       s.message(), "); run `kubetrain local serve`"));
    }
    out << "Job [" << name << "] submitted successfully.\n";
    if (!streaming) {
      // With --local: the commands must find the job where it is, whatever
      // KUBETRAIN_BACKEND says in the shell they are run from.
      out << "Your job is still active. You may view the status of your job with the command\n\n"
          << "  $ kubetrain jobs describe " << name << " --local\n\n"
          << "or continue streaming the logs with the command\n\n"
          << "  $ kubetrain jobs stream-logs " << name << " --local\n";
    }
    out << "jobId: " << name << "\nstate: QUEUED\n" << std::flush;
    return absl::OkStatus();
  }

  // Replicas here are processes of this machine, and a replica that runs an
  // image's entrypoint a podman container: without podman it has nothing to
  // run.
  static absl::Status RunsOnThisMachine(const v1::TrainingJob& job) {
    if (!local::FindPodman().empty()) return absl::OkStatus();
    const std::vector<api::ReplicaGroup> groups = api::ImageEntrypointGroups(job);
    if (groups.empty()) return absl::OkStatus();
    const api::ReplicaGroup& group = groups.front();
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.trainingInput.", std::string(api::ReplicaConfigField(group.role)), ".imageUri: the ",
        std::string(api::RoleName(group.role)), " runs the entrypoint of image ",
        group.config.image_uri(),
        " (no containerCommand), and the local backend runs images with podman, which is not "
        "on PATH (nor named by KUBETRAIN_PODMAN): install podman, give containerCommand, the "
        "command to run on this machine, or submit the job to a cluster"));
  }

  absl::StatusOr<v1::TrainingJob> Get(const std::string& job_id) override {
    return store_->GetJob(job_id);
  }
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> ArchivedTrials(
      const v1::TrainingJob& job) override {
    return store_->ArchivedTrials(job.metadata().name());
  }
  std::optional<absl::StatusOr<std::vector<JobEvent>>> Events(const v1::TrainingJob&) override {
    return std::nullopt;
  }
  absl::StatusOr<std::vector<v1::TrainingJob>> List() override { return store_->ListJobs(); }

  absl::Status Cancel(const std::string& job_id) override {
    if (absl::Status s = store_->RequestCancel(job_id); !s.ok()) return s;
    if (absl::Status s = EnsureLocalController(home_); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cancel recorded, but no controller could be started to carry it out (",
                       s.message(), "); run `kubetrain local serve`"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::TrainingJob> Follow(const std::string& job_id, const FollowOptions& options,
                                         std::ostream& out) override {
    return FollowJob(*store_, home_, job_id, options, out);
  }

  absl::Status KeepUnfinishedJobsMoving() override {
    if (absl::Status s = EnsureLocalController(home_); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("no local controller is running and none could be started (", s.message(),
                       "); run `kubetrain local serve`"));
    }
    return absl::OkStatus();
  }

 private:
  const std::string home_;
  std::unique_ptr<local::JobStore> store_;
};

}  // namespace

std::unique_ptr<JobsBackend> LocalJobsBackend() { return std::make_unique<LocalBackend>(); }

}  // namespace kubetrain::cli
