#include "cli/cluster_logs.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cli/jobs_format.h"
#include "nlohmann/json.hpp"
#include "operator/core/kube_objects.h"
#include "operator/core/naming.h"
#include "operator/core/reconciler.h"
#include "operator/kube/cluster_client.h"
#include "operator/local/controller.h"

namespace kubetrain::cli {
namespace {

using nlohmann::json;

// Errors reading the job or its pods that are retried before giving up.
constexpr int kMaxConsecutiveUnavailable = 10;

// How long, after the job and a container have ended, its follower may take
// to read what the container left: a bound against an API server that stops
// answering mid-read, never reached otherwise.
constexpr absl::Duration kEndedPodReadLimit = absl::Seconds(30);

std::string Rfc3339Nano(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E*SZ", t, absl::UTCTimeZone());
}

std::string Meta(const json& object, const char* field) {
  if (!object.is_object() || !object.contains("metadata") || !object["metadata"].is_object()) {
    return "";
  }
  const json& md = object["metadata"];
  return md.contains(field) && md[field].is_string() ? md[field].get<std::string>() : "";
}

// Whether the pod has ended: Succeeded or Failed, its containers will not
// run again.
bool PodEnded(const json& pod) {
  if (!pod.is_object() || !pod.contains("status") || !pod["status"].is_object()) return false;
  const std::string phase = pod["status"].value("phase", "");
  return phase == "Succeeded" || phase == "Failed";
}

// One writer at a time, a whole line at a time.
class Printer {
 public:
  explicit Printer(std::ostream& out) : out_(out) {}
  void Line(const std::string& line) {
    absl::MutexLock lock(&mu_);
    out_ << line << "\n" << std::flush;
  }

 private:
  absl::Mutex mu_;
  std::ostream& out_;  // written under mu_
};

using PodRef = ReplicaPod;

// Follows one pod's training container: steps 2 and 3 of the header.
class PodFollower {
 public:
  PodFollower(kube::ClusterClient& client, std::string ns, PodRef pod, absl::Duration poll,
              Printer& printer)
      : client_(client), ns_(std::move(ns)), pod_(std::move(pod)), poll_(poll), printer_(printer) {}
  ~PodFollower() {
    Stop();
    if (thread_.joinable()) thread_.join();
  }

  void Start() {
    thread_ = std::thread([this] {
      Run();
      done_ = true;
    });
  }
  // Ends the follow: open reads are cancelled, a wait cut short.
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (kube::LogStream* stream : streams_) stream->Cancel();
  }
  bool done() const { return done_.load(); }
  const std::string& pod_uid() const { return pod_.uid; }

 private:
  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }
  void Wait(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  }

  void Run() {
    while (!Stopping()) {
      bool printed = false;
      // The run before the current one: what a restart left that no read has
      // seen yet (all of it, the first time). A 400 when there is none.
      absl::Status previous = ReadRun(/*previous=*/true, &printed);
      if (absl::IsNotFound(previous)) return;
      absl::Status current = ReadRun(/*previous=*/false, &printed);
      if (absl::IsNotFound(current) || Stopping()) return;
      if (absl::IsPermissionDenied(current) || absl::IsUnauthenticated(current)) {
        // RBAC is the user's: say so once, and let the other replicas go on.
        printer_.Line(absl::StrCat("[kubetrain] cannot read the log of pod ", pod_.name, ": ",
                                   current.message()));
        return;
      }
      if (current.ok() || absl::IsInvalidArgument(current)) {
        // The container stopped (or has not started): will it run again?
        absl::StatusOr<json> pod = client_.Get(kube::kPods, ns_, pod_.name);
        if (absl::IsNotFound(pod.status())) return;
        if (pod.ok()) {
          if (Meta(*pod, "uid") != pod_.uid) return;  // another pod of that name
          if (PodEnded(*pod)) return;
        }
      }
      // A read that brought nothing waits before the next one; one cut
      // short mid-stream resumes at once.
      if (!printed) Wait(poll_);
    }
  }

  // Reads the previous or the current run and prints the lines not printed
  // before; a read of the previous run stops before the first line stamped
  // `until` or later. Returns how the request was answered: OK when the log
  // ended, NotFound for a pod that is gone, InvalidArgument (400) for a
  // container without such a run, Unavailable for a dropped connection.
  absl::Status ReadRun(bool previous, bool* printed, absl::Time until = absl::InfiniteFuture()) {
    kube::LogOptions options;
    options.container = core::kContainerName;
    options.previous = previous;
    options.follow = !previous;
    options.timestamps = true;
    const absl::Time resume = last_time_;
    int to_skip = printed_at_last_;  // lines stamped `resume` already printed
    if (resume != absl::InfinitePast()) options.since_time = Rfc3339Nano(resume);
    absl::StatusOr<std::unique_ptr<kube::LogStream>> stream =
        client_.StreamLog(ns_, pod_.name, options);
    if (!stream.ok()) return stream.status();
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("stopped");
      streams_.insert(stream->get());
    }
    // The run before this one was read up to the last printed line, but the
    // container may have restarted between that read and this request. Its
    // remaining lines are older than any of this run's, so they are printed
    // first: the previous run is read again before this run's first new line.
    bool previous_run_read = previous;
    absl::Status result;
    for (;;) {
      absl::StatusOr<std::optional<std::string>> line = (*stream)->NextLine();
      if (!line.ok()) {
        result = line.status();
        break;
      }
      if (!line->has_value()) break;
      // "<RFC 3339 time> <message>"
      const std::string& text = **line;
      const size_t space = text.find(' ');
      absl::Time time;
      std::string error;
      if (space == std::string::npos ||
          !absl::ParseTime(absl::RFC3339_full, text.substr(0, space), &time, &error)) {
        continue;  // not a line of the log: nothing the API server sends
      }
      if (time >= until) break;
      if (time < resume) continue;
      if (time == resume && to_skip > 0) {
        --to_skip;
        continue;
      }
      if (!previous_run_read) {
        previous_run_read = true;
        absl::Status rest = ReadRun(/*previous=*/true, printed, /*until=*/time);
        // Without a previous run (400), or a pod (404), there is nothing
        // more to read. Anything else (a dropped connection, a stop) ends
        // this read before its line is printed, so that the next one tries
        // again.
        if (!rest.ok() && !absl::IsInvalidArgument(rest) && !absl::IsNotFound(rest)) {
          result = rest;
          break;
        }
      }
      if (time == last_time_) {
        ++printed_at_last_;
      } else {
        last_time_ = time;
        printed_at_last_ = 1;
      }
      const std::string message = text.substr(space + 1);
      printer_.Line(FormatLogEntry(LogSeverity(/*from_stderr=*/true, message),
                                   absl::ToDoubleSeconds(time - absl::UnixEpoch()), pod_.task,
                                   pod_.trial, message));
      *printed = true;
    }
    absl::MutexLock lock(&mu_);
    streams_.erase(stream->get());
    return result;
  }

  kube::ClusterClient& client_;
  const std::string ns_;
  const PodRef pod_;
  const absl::Duration poll_;
  Printer& printer_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  // Where the printed log stands: the last line's stamp, and how many lines
  // with that stamp were printed.
  absl::Time last_time_ = absl::InfinitePast();
  int printed_at_last_ = 0;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The open reads: the current run's, and the previous run's while it is
  // read again from inside it.
  std::set<kube::LogStream*> streams_ ABSL_GUARDED_BY(mu_);
};

class JobLogFollower {
 public:
  JobLogFollower(kube::ClusterClient& client, std::string ns, std::string job_object_name,
                 const std::function<absl::StatusOr<v1::TrainingJob>()>& get_job,
                 const ClusterLogOptions& options, std::ostream& out)
      : client_(client),
        ns_(std::move(ns)),
        job_object_name_(std::move(job_object_name)),
        get_job_(get_job),
        options_(options),
        printer_(out) {}

  absl::StatusOr<v1::TrainingJob> Run() {
    int unavailable = 0;
    for (;;) {
      absl::StatusOr<v1::TrainingJob> job = get_job_();
      absl::Status s = job.status();
      if (s.ok()) {
        ShowProgress(*job);
        s = PrintNewEvents(job->metadata().uid());
      }
      if (s.ok()) s = FollowNewPods();
      if (absl::IsUnavailable(s) && ++unavailable < kMaxConsecutiveUnavailable) {
        absl::SleepFor(options_.poll_interval);
        continue;
      }
      if (!s.ok()) {
        StopAll();
        return s;
      }
      unavailable = 0;
      if (core::IsTerminal(job->status().state())) {
        Drain();
        (void)PrintNewEvents(job->metadata().uid());  // the last ones, when already written
        return job;
      }
      absl::SleepFor(options_.poll_interval);
    }
  }

 private:
  bool WantsLogs() const { return options_.task_filter != "service"; }
  bool WantsEvents() const {
    return options_.task_filter.empty() || options_.task_filter == "service";
  }

  void ShowProgress(const v1::TrainingJob& job) {
    if (!options_.progress) return;
    const v1::State state =
        job.status().state() == v1::STATE_UNSPECIFIED ? v1::QUEUED : job.status().state();
    if (state != last_state_) {
      printer_.Line(
          absl::StrCat("[kubetrain] job [", job.metadata().name(), "] is ", v1::State_Name(state)));
      last_state_ = state;
    }
    const std::string line = ProgressLine(job);
    if (!line.empty() && line != last_progress_) printer_.Line("[kubetrain] " + line);
    last_progress_ = line;
  }

  // The job's Events (the operator's story: created, running, restarts,
  // waiting reasons, trials) as "service" lines, each once.
  absl::Status PrintNewEvents(const std::string& job_uid) {
    if (!WantsEvents() || !events_readable_) return absl::OkStatus();
    kube::ListOptions list;
    list.field_selector =
        absl::StrCat("involvedObject.kind=TrainingJob,involvedObject.name=", job_object_name_);
    absl::StatusOr<json> events = client_.List(kube::kEvents, ns_, list);
    if (absl::IsPermissionDenied(events.status())) {
      // Logs without events are still worth following.
      printer_.Line(
          absl::StrCat("[kubetrain] the job's events are not shown: ", events.status().message()));
      events_readable_ = false;
      return absl::OkStatus();
    }
    if (!events.ok()) return events.status();
    struct Entry {
      absl::Time time;
      int64_t version;
      std::string line;
    };
    std::vector<Entry> entries;
    for (const json& e : events->value("items", json::array())) {
      if (!e.is_object() || !e.contains("involvedObject") || !e["involvedObject"].is_object()) {
        continue;
      }
      // A job deleted and submitted again under its name has other events.
      if (e["involvedObject"].value("uid", "") != job_uid) continue;
      const std::string key = Meta(e, "uid").empty() ? Meta(e, "name") : Meta(e, "uid");
      if (!events_seen_.insert(key).second) continue;
      const std::string message = e.value("message", "");
      const std::string trial = EventTrial(message);
      if (!options_.trial_filter.empty() && !trial.empty() && trial != options_.trial_filter) {
        continue;
      }
      absl::Time time = absl::Now();
      for (const char* field : {"lastTimestamp", "eventTime", "firstTimestamp"}) {
        std::string error;
        if (e.contains(field) && e[field].is_string() &&
            absl::ParseTime(absl::RFC3339_full, e[field].get<std::string>(), &time, &error)) {
          break;
        }
      }
      int64_t version = 0;
      (void)absl::SimpleAtoi(Meta(e, "resourceVersion"), &version);
      const bool warning = e.value("type", "") == "Warning";
      entries.push_back({time, version,
                         FormatLogEntry(warning ? "WARNING" : "INFO",
                                        absl::ToDoubleSeconds(time - absl::UnixEpoch()), "service",
                                        trial, e.value("reason", "") + ": " + message)});
    }
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.time, a.version) < std::tie(b.time, b.version);
    });
    for (const Entry& e : entries) printer_.Line(e.line);
    return absl::OkStatus();
  }

  absl::Status FollowNewPods() {
    if (!WantsLogs()) return absl::OkStatus();
    absl::StatusOr<std::vector<ReplicaPod>> pods = ListReplicaPods(client_, ns_, job_object_name_);
    if (!pods.ok()) return pods.status();
    for (const ReplicaPod& ref : *pods) {
      if (followed_.count(ref.uid) > 0) continue;
      if (!options_.task_filter.empty() && ref.task != options_.task_filter) continue;
      if (!options_.trial_filter.empty() && ref.trial != options_.trial_filter) continue;
      followed_.insert(ref.uid);
      auto follower =
          std::make_unique<PodFollower>(client_, ns_, ref, options_.poll_interval, printer_);
      follower->Start();
      followers_.push_back(std::move(follower));
    }
    // Followers that are done are joined as they go, so a long study does
    // not keep a thread per trial replica it ever had.
    std::erase_if(followers_, [](const std::unique_ptr<PodFollower>& f) { return f->done(); });
    return absl::OkStatus();
  }

  // Step 4 of the header. A container that has ended has all its lines
  // there to read, however long the reads take (a loaded API server); one
  // still running (a parameter server under cleanPodPolicy None) may write
  // for `drain` more, and is then cut off.
  void Drain() {
    if (AwaitFollowers(absl::Now() + options_.drain)) {
      StopAll();  // every container's log was read whole: nothing to ask
      return;
    }
    const std::set<std::string> ended = EndedPods();
    for (auto& f : followers_) {
      if (ended.count(f->pod_uid()) == 0) f->Stop();
    }
    AwaitFollowers(absl::Now() + kEndedPodReadLimit);
    StopAll();
  }

  // Whether every follower was done by `deadline`.
  bool AwaitFollowers(absl::Time deadline) {
    auto all_done = [&] {
      return std::all_of(followers_.begin(), followers_.end(),
                         [](const std::unique_ptr<PodFollower>& f) { return f->done(); });
    };
    while (!all_done()) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  }

  // The uids of the job's pods that have ended (Succeeded or Failed); none
  // when they cannot be listed.
  std::set<std::string> EndedPods() {
    kube::ListOptions list;
    list.label_selector = core::JobSelector(job_object_name_);
    absl::StatusOr<json> pods = client_.List(kube::kPods, ns_, list);
    std::set<std::string> ended;
    if (!pods.ok()) return ended;
    for (const json& pod : pods->value("items", json::array())) {
      if (PodEnded(pod)) ended.insert(Meta(pod, "uid"));
    }
    return ended;
  }

  void StopAll() {
    for (auto& f : followers_) f->Stop();
    followers_.clear();  // joins
  }

  kube::ClusterClient& client_;
  const std::string ns_;
  const std::string job_object_name_;
  const std::function<absl::StatusOr<v1::TrainingJob>()>& get_job_;
  const ClusterLogOptions options_;
  Printer printer_;
  std::vector<std::unique_ptr<PodFollower>> followers_;
  std::set<std::string> followed_;  // pod uids, each followed once
  std::set<std::string> events_seen_;
  bool events_readable_ = true;
  v1::State last_state_ = v1::STATE_UNSPECIFIED;
  std::string last_progress_;
};

}  // namespace

absl::StatusOr<std::vector<ReplicaPod>> ListReplicaPods(kube::ClusterClient& client,
                                                        const std::string& ns,
                                                        const std::string& job_object_name) {
  kube::ListOptions list;
  list.label_selector = core::JobSelector(job_object_name);
  absl::StatusOr<json> pods = client.List(kube::kPods, ns, list);
  if (!pods.ok()) return pods.status();
  std::vector<ReplicaPod> replicas;
  for (const json& pod : pods->value("items", json::array())) {
    ReplicaPod ref{Meta(pod, "name"), Meta(pod, "uid"), "", ""};
    if (ref.name.empty() || ref.uid.empty()) continue;
    std::map<std::string, std::string> labels;
    if (pod["metadata"].contains("labels") && pod["metadata"]["labels"].is_object()) {
      for (const auto& [k, v] : pod["metadata"]["labels"].items()) {
        if (v.is_string()) labels[k] = v.get<std::string>();
      }
    }
    std::optional<core::ReplicaKey> key = core::ReplicaKeyFromLabels(labels);
    if (!key) continue;  // not one of the job's replicas
    ref.task = local::LogTaskName(*key);
    ref.trial = key->trial_id;
    replicas.push_back(std::move(ref));
  }
  return replicas;
}

absl::StatusOr<std::string> ReadReplicaLog(kube::ClusterClient& client, const std::string& ns,
                                           const std::string& pod) {
  kube::LogOptions options;
  options.container = core::kContainerName;
  options.timestamps = true;
  absl::StatusOr<std::unique_ptr<kube::LogStream>> stream = client.StreamLog(ns, pod, options);
  if (!stream.ok()) return stream.status();
  std::string text;
  for (;;) {
    absl::StatusOr<std::optional<std::string>> line = (*stream)->NextLine();
    if (!line.ok()) return line.status();
    if (!line->has_value()) break;
    absl::StrAppend(&text, **line, "\n");
  }
  return text;
}

absl::StatusOr<v1::TrainingJob> FollowClusterLogs(
    kube::ClusterClient& client, const std::string& ns, const std::string& job_object_name,
    const std::function<absl::StatusOr<v1::TrainingJob>()>& get_job,
    const ClusterLogOptions& options, std::ostream& out) {
  JobLogFollower follower(client, ns, job_object_name, get_job, options, out);
  return follower.Run();
}

}  // namespace kubetrain::cli
