#include "operator/local/controller.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/scale_tiers.h"
#include "api/storage_uri.h"
#include "api/validation.h"
#include "operator/core/admission_queue.h"
#include "operator/core/carry_out.h"
#include "operator/core/naming.h"
#include "operator/core/previous_study.h"
#include "operator/core/tf_config.h"
#include "operator/local/container_replica.h"

namespace kubetrain::local {
namespace {

// The last line the replica wrote to stderr, as its termination message
// (what a pod's terminationMessagePolicy FallbackToLogsOnError gives).
std::string LastErrorLine(const std::string& log_path) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > 16384 ? size - 16384 : 0;
  in.seekg(start);
  std::string line;
  std::string last;
  while (std::getline(in, line)) {
    LogLine parsed = ParseLogLine(line);
    if (parsed.stderr && !parsed.message.empty()) last = parsed.message;
  }
  return last;
}

core::ObservedReplica Observe(const ReplicaRecord& record, const ProcessStatus& status) {
  core::ObservedReplica observed;
  observed.name = record.name;
  observed.key = record.key;
  observed.created = record.created;
  observed.container_restarts = status.restarts;
  observed.run_since = status.run_since;
  observed.finished = status.finished;
  switch (status.state) {
    case ProcessStatus::State::kRunning:
      observed.phase = core::ReplicaPhase::kRunning;
      observed.exit_code = status.last_exit_code;
      break;
    case ProcessStatus::State::kExited:
      observed.phase =
          *status.exit_code == 0 ? core::ReplicaPhase::kSucceeded : core::ReplicaPhase::kFailed;
      observed.exit_code = status.exit_code;
      if (*status.exit_code != 0) observed.termination_message = LastErrorLine(record.log_path);
      break;
    case ProcessStatus::State::kGone:
      // Killed from outside with its supervisor: like a pod whose node died.
      observed.phase = core::ReplicaPhase::kFailed;
      observed.reason = "ProcessLost";
      observed.node_lost = true;
      observed.termination_message = "the replica's process group disappeared";
      break;
  }
  return observed;
}

// How long a replica recorded as starting may take to show its pid.
constexpr absl::Duration kStartGracePeriod = absl::Seconds(30);

// How long after its SIGKILL a terminating replica may still show before the
// reconciler takes it as stuck (the deletion_time it is given): SIGKILL ends
// a group at once, so only a sync that came late needs the margin.
constexpr absl::Duration kStuckAfterKill = absl::Seconds(30);

bool IsDefaultRuntimeCommand(const std::vector<std::string>& command) {
  return command.size() == 2 && command[0] == "kubetrain-runtime" && command[1] == "train";
}

// Whether the job's replicas of `role` run their image's entrypoint, which
// this backend runs in a container (container_replica.h).
bool RunsInContainer(const v1::TrainingJob& job, api::Role role) {
  const std::vector<api::ReplicaGroup> groups = api::ImageEntrypointGroups(job);
  return std::any_of(groups.begin(), groups.end(),
                     [&](const api::ReplicaGroup& group) { return group.role == role; });
}

// Whether a package is to be installed: a URL (or other URI, which exec
// refuses with its reason) or a file here, such as an sdist. Folders go on
// PYTHONPATH as they are.
bool AnyToInstall(const google::protobuf::RepeatedPtrField<std::string>& packages) {
  std::error_code ec;
  for (const std::string& package : packages) {
    if (!api::UriScheme(package).empty() || std::filesystem::is_regular_file(package, ec)) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string LogTaskName(const core::ReplicaKey& key) {
  return absl::StrCat(std::string(api::RoleName(key.role)), "-replica-", key.index);
}

std::string JobDir(const std::string& home, const std::string& job_name) {
  return absl::StrCat(home, "/jobs/", job_name);
}

std::string LogPath(const std::string& home, const std::string& job_name,
                    const std::string& trial_id, const std::string& task_name) {
  return absl::StrCat(JobDir(home, job_name), "/logs/",
                      trial_id.empty() ? "" : absl::StrCat("trial-", trial_id, "/"), task_name,
                      ".log");
}

absl::StatusOr<bool> AnyReplicaRunning(JobStore& store, ProcessLauncher& launcher,
                                       const std::string& job) {
  absl::StatusOr<std::vector<ReplicaRecord>> records = store.ListReplicas(job);
  if (!records.ok()) return records.status();
  for (const ReplicaRecord& r : *records) {
    if (r.pid == kPidStarting) return true;
    if (r.pid != 0 && launcher.Probe({r.pid, r.start_ticks}, r.exit_path, r.state_path).state ==
                          ProcessStatus::State::kRunning) {
      return true;
    }
  }
  return false;
}

// Draws of a free port before a replica's creation is given up.
constexpr int kPortDraws = 100;

absl::StatusOr<int> PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::string message = std::strerror(errno);
    close(fd);
    return absl::UnavailableError("cannot find a free port on 127.0.0.1: " + message);
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

Controller::Controller(JobStore* store, ProcessLauncher* launcher, ControllerOptions options)
    : store_(store), launcher_(launcher), options_(std::move(options)) {
  if (!options_.allocate_port) options_.allocate_port = PickFreePort;
}

namespace {

// The machine, as admission's one node.
constexpr char kThisMachine[] = "this machine";

}  // namespace

absl::StatusOr<std::map<std::string, core::AdmissionVerdict>> Controller::PlanSlots(
    const std::vector<v1::TrainingJob>& jobs) {
  const int64_t slots = options_.slots;
  core::ClusterState machine;
  machine.nodes.push_back({.name = kThisMachine, .allocatable = {{"pods", slots * 1000}}});
  // Per job: its processes, and the thousandths of a slot each takes (all
  // of them together never more than every slot).
  std::map<std::string, int64_t> processes, share;
  std::vector<core::JobToAdmit> entries;
  std::vector<std::unique_ptr<v1::TrainingJob>> normalized;
  std::map<std::string, std::vector<core::PodPlacement>> gangs;  // by "job/trial"
  std::shared_ptr<const api::PythonRuntimeCatalog> runtimes =
      options_.runtime_catalog != nullptr ? options_.runtime_catalog->Current() : nullptr;
  for (size_t seq = 0; seq < jobs.size(); ++seq) {
    const v1::TrainingJob& job = jobs[seq];
    const std::string& name = job.metadata().name();
    if (!core::TakesPartInAdmission(job)) continue;
    core::ReconcileOptions reconcile;
    reconcile.runtimes = runtimes;
    if (!api::Validate(job, {.runtimes = &core::Runtimes(reconcile)}).empty()) continue;
    normalized.push_back(std::make_unique<v1::TrainingJob>(core::Normalize(job)));
    const v1::TrainingJob& defaulted = *normalized.back();
    const v1::TrainingInput& input = defaulted.spec().training_input();
    const std::vector<api::ReplicaGroup> groups = api::ReplicaGroups(input);
    int64_t n = 0;
    for (const api::ReplicaGroup& group : groups) n += group.count;
    processes[name] = n;
    share[name] = n <= slots ? 1000 : slots * 1000 / std::max<int64_t>(n, 1);
    core::JobToAdmit entry;
    entry.key = name;
    entry.job = &job;
    // The store lists jobs as they were submitted: that order, within a second.
    entry.tie_breaker = absl::StrFormat("%012d", seq);
    entry.pods_of = [&, name, groups, use_chief = input.use_chief_in_tf_config(),
                     object_name = core::JobObjectName(defaulted)](
                        const std::string& trial) -> const std::vector<core::PodPlacement>& {
      std::vector<core::PodPlacement>& gang = gangs[absl::StrCat(name, "/", trial)];
      gang.clear();
      for (const api::ReplicaGroup& group : groups) {
        for (int64_t i = 0; i < group.count; ++i) {
          core::PodPlacement process;
          process.name = core::ReplicaName(
              object_name, {.trial_id = trial, .role = group.role, .index = i}, use_chief);
          process.requests = {{"pods", share[name]}};
          gang.push_back(std::move(process));
        }
      }
      return gang;
    };
    entries.push_back(std::move(entry));
  }
  // Nothing waits and nothing is admitted (the usual case, between
  // submissions): no need to read every job's replicas.
  if (entries.empty()) return std::map<std::string, core::AdmissionVerdict>();
  // The processes that run (or start) now hold their slots.
  int64_t held = 0;
  absl::StatusOr<std::vector<ReplicaRecord>> records = store_->ListAllReplicas();
  if (!records.ok()) return records.status();
  for (const ReplicaRecord& record : *records) {
    if (record.pid != kPidStarting && !launcher_->Alive({record.pid, record.start_ticks})) {
      continue;
    }
    auto job_share = share.find(record.job);
    core::PodPlacement process;
    process.name = record.name;
    process.node = kThisMachine;
    process.requests = {{"pods", job_share != share.end() ? job_share->second : 1000}};
    held += process.requests["pods"];
    machine.pods.push_back(std::move(process));
  }
  std::map<std::string, core::AdmissionVerdict> verdicts =
      core::PlanJobs(machine, entries, options_.clock());
  // What this plan's admissions take, besides what runs.
  std::map<std::string, const v1::TrainingJob*> by_name;
  for (const v1::TrainingJob& job : jobs) by_name[job.metadata().name()] = &job;
  for (const auto& [name, verdict] : verdicts) {
    if (!verdict.admitted()) continue;
    const v1::TrainingJobStatus& status = by_name[name]->status();
    int64_t gangs = core::AdmittedByStatus(status) ? 0 : 1;
    if (verdict.admitted_trials > 0) {
      gangs = verdict.admitted_trials -
              std::max(status.admitted_trial_count(), status.training_output().total_trial_count());
    }
    held += std::max<int64_t>(0, gangs) * processes[name] * share[name];
  }
  // In this machine's words: processes and slots, not pods and nodes.
  const int64_t free_slots = std::max<int64_t>(0, (slots * 1000 - held) / 1000);
  for (auto& [name, verdict] : verdicts) {
    const int64_t n = processes[name];
    const std::string alone =
        n > slots ? absl::StrCat(" (more than the ", slots, " slots: it runs alone)") : "";
    if (verdict.admitted()) {
      if (verdict.message.empty() || absl::StartsWith(verdict.message, "its ")) {
        verdict.message = absl::StrCat("its ", n, n == 1 ? " process has" : " processes have",
                                       " process slots now", alone);
      }
    } else {
      verdict.message = absl::StrCat("needs ", n, n == 1 ? " process slot" : " process slots",
                                     alone, "; ", free_slots, " of this machine's ", slots,
                                     " are free now; ", core::JobsAhead(verdict.position - 1));
    }
  }
  return verdicts;
}

absl::StatusOr<int> Controller::SyncAll() {
  absl::StatusOr<std::vector<v1::TrainingJob>> jobs = store_->ListJobs();
  if (!jobs.ok()) return jobs.status();
  if (options_.slots > 0) {
    absl::StatusOr<std::map<std::string, core::AdmissionVerdict>> verdicts = PlanSlots(*jobs);
    if (!verdicts.ok()) return verdicts.status();
    slot_verdicts_ = *std::move(verdicts);
  }
  int active = 0;
  std::vector<std::string> errors;
  for (const v1::TrainingJob& job : *jobs) {
    absl::StatusOr<bool> more = SyncJob(job.metadata().name());
    if (!more.ok()) {
      errors.push_back(absl::StrCat(job.metadata().name(), ": ", more.status().message()));
      ++active;
    } else if (*more) {
      ++active;
    }
  }
  if (!errors.empty()) return absl::InternalError(absl::StrJoin(errors, "; "));
  return active;
}

std::string Controller::TaskFileStem(const core::ReplicaKey& key) const {
  return absl::StrCat(key.trial_id.empty() ? "" : absl::StrCat("trial-", key.trial_id, "/"),
                      LogTaskName(key));
}

// Carries out a reconcile result on processes and the store: deletes are
// process terminations spread over syncs (Termination); creates skip a
// replica that has a record (AlreadyExists); Services and claims do not
// exist here. Each step stops at its first failure.
class Controller::JobSink : public core::ResultSink {
 public:
  JobSink(Controller* controller, v1::TrainingJob* job, const std::vector<ReplicaRecord>* records,
          absl::Time now)
      : c_(controller), job_(job), name_(job->metadata().name()), records_(records), now_(now) {}

  absl::Status Archive(const std::vector<v1::HyperparameterOutput>& trials) override {
    for (const v1::HyperparameterOutput& trial : trials) {
      if (absl::Status s = c_->store_->ArchiveTrial(name_, trial); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status WriteStatus(const v1::TrainingJobStatus& status) override {
    if (absl::Status s = c_->store_->UpdateStatus(name_, status); !s.ok()) return s;
    *job_->mutable_status() = status;
    return absl::OkStatus();
  }

  absl::Status Delete(const std::vector<core::Deletion>& deletions) override {
    for (const core::Deletion& deletion : deletions) {
      const auto* del = std::get_if<core::DeleteReplica>(&deletion);
      if (del == nullptr) continue;
      for (const ReplicaRecord& record : *records_) {
        if (record.name != del->name) continue;
        auto [it, first] = c_->terminations_.try_emplace(
            record.name, Termination{.job = name_,
                                     .id = {record.pid, record.start_ticks},
                                     .kill_at = now_ + kKillGracePeriod,
                                     .record = record});
        if (first && !c_->options_.podman.empty() && RunsInContainer(*job_, record.key.role)) {
          it->second.container = ContainerName(c_->options_.home, record.name);
        }
        if (!first && (!del->force || it->second.killed)) continue;  // already under way
        absl::Status s = del->force ? c_->launcher_->ForceKill(it->second.id)
                                    : c_->launcher_->Terminate(it->second.id);
        if (!s.ok()) {
          return absl::Status(s.code(),
                              absl::StrCat("deleting replica ", record.name, ": ", s.message()));
        }
        it->second.killed = del->force;
      }
    }
    // Replicas that stopped at once lose their record in this sync already.
    return c_->AdvanceTerminations(name_).status();
  }

  absl::Status Create(const std::vector<core::Creation>& creations) override {
    for (const core::Creation& creation : creations) {
      const auto* create = std::get_if<core::CreateReplica>(&creation);
      if (create == nullptr) continue;
      bool exists = false;
      for (const ReplicaRecord& record : *records_) {
        exists = exists || record.name == create->replica.name;
      }
      if (exists) continue;  // AlreadyExists is success
      if (absl::Status s = c_->CreateReplica(*job_, create->replica); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Emit(const std::vector<core::EmitEvent>& events) override {
    for (const core::EmitEvent& event : events) {
      StoredEvent stored{now_, event.type == core::EmitEvent::Type::kWarning ? "Warning" : "Normal",
                         event.reason, event.message};
      if (absl::Status s = c_->store_->AddEvent(name_, stored); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  Controller* const c_;
  v1::TrainingJob* const job_;
  const std::string name_;
  const std::vector<ReplicaRecord>* const records_;
  const absl::Time now_;
};

absl::StatusOr<bool> Controller::SyncJob(const std::string& name) {
  absl::StatusOr<v1::TrainingJob> job = store_->GetJob(name);
  if (!job.ok()) return job.status();
  absl::StatusOr<bool> terminating = AdvanceTerminations(name);
  if (!terminating.ok()) return terminating.status();
  absl::StatusOr<std::vector<ReplicaRecord>> records = store_->ListReplicas(name);
  if (!records.ok()) return records.status();

  // 1. Observe the processes, then (so that every report written before an
  // exit we saw is read) their metric files.
  core::Observed observed;
  bool any_running = false;
  for (const ReplicaRecord& record : *records) {
    ProcessStatus status;
    if (record.pid == kPidStarting) {
      // The controller died while starting it: the supervisor, if it got as
      // far, has written its pid. Until then the replica is pending. A
      // supervisor writes its pid before it starts the replica (and until
      // then keeps its controller's lock, inherited, so no new controller
      // runs), so one that never appears means that nothing ran: the record
      // goes and the replica is created again, never started twice behind
      // our back nor lost with its trial.
      if (std::optional<int> pid = ReadSupervisorPid(record.pid_path)) {
        ReplicaRecord adopted = record;
        adopted.pid = *pid;
        adopted.start_ticks = ProcessStartTicks(*pid).value_or(0);
        if (absl::Status s = store_->PutReplica(adopted); !s.ok()) return s;
        status = launcher_->Probe({adopted.pid, adopted.start_ticks}, record.exit_path,
                                  record.state_path);
      } else if (options_.clock() - record.created < kStartGracePeriod) {
        core::ObservedReplica pending;
        pending.name = record.name;
        pending.key = record.key;
        pending.created = record.created;
        pending.phase = core::ReplicaPhase::kPending;
        observed.replicas.push_back(pending);
        any_running = true;
        continue;
      } else {
        if (absl::Status s = store_->DeleteReplica(record.name); !s.ok()) return s;
        continue;
      }
    } else if (record.pid == 0) {
      // It never started (see CreateReplica): it failed with exit code 127.
      status.state = ProcessStatus::State::kExited;
      status.exit_code = 127;
    } else {
      status =
          launcher_->Probe({record.pid, record.start_ticks}, record.exit_path, record.state_path);
    }
    any_running = any_running || status.state == ProcessStatus::State::kRunning;
    observed.replicas.push_back(Observe(record, status));
    if (auto t = terminations_.find(record.name); t != terminations_.end()) {
      observed.replicas.back().deletion_requested = true;
      observed.replicas.back().deletion_time = t->second.kill_at + kStuckAfterKill;
    }
  }
  // A finished job whose processes have all ended has nothing left to do
  // (ended replicas stay on record, as completed pods do).
  if (core::IsTerminal(job->status().state()) && !any_running && !*terminating) return false;
  for (const ReplicaRecord& record : *records) {
    if (absl::Status s = ReadMetricFile(name, record); !s.ok()) return s;
  }
  auto metrics = store_->MetricReports(name);
  if (!metrics.ok()) return metrics.status();
  observed.trial_metrics = *std::move(metrics);
  auto archived = store_->ArchivedTrials(name);
  if (!archived.ok()) return archived.status();
  observed.archived_trials = *std::move(archived);
  // The study this one continues: the earlier job in the same store.
  absl::StatusOr<core::PreviousStudy> previous = core::FindPreviousStudy(
      *job, {.find_job = [this](const std::string& previous_name)
                 -> absl::StatusOr<std::optional<v1::TrainingJob>> {
               absl::StatusOr<v1::TrainingJob> found = store_->GetJob(previous_name);
               if (absl::IsNotFound(found.status())) return std::nullopt;
               if (!found.ok()) return found.status();
               return *std::move(found);
             },
             .archived_trials =
                 [this](const v1::TrainingJob& previous_job) {
                   return store_->ArchivedTrials(previous_job.metadata().name());
                 }});
  if (!previous.ok()) return previous.status();
  observed.previous_study = *std::move(previous);

  // 2. Reconcile.
  auto ports = store_->Ports(name);
  if (!ports.ok()) return ports.status();
  absl::Status port_error;
  if (options_.slots > 0) {
    if (auto verdict = slot_verdicts_.find(name); verdict != slot_verdicts_.end()) {
      observed.admission = verdict->second;
    }
  }
  core::ReconcileOptions options;
  options.services = false;
  options.gang_admission = options_.slots > 0;
  options.machine_gpus = options_.machine_gpus;
  options.tuner_factory = options_.tuner_factory;
  options.stop_rule = options_.stop_rule;
  if (options_.runtime_catalog != nullptr) options.runtimes = options_.runtime_catalog->Current();
  options.address = core::LoopbackAddresses([&](std::string_view replica) -> int {
    auto it = ports->find(std::string(replica));
    if (it != ports->end()) return it->second;
    // The kernel may hand out a port it just gave (the probe socket is
    // closed at once), and two replicas on one port is a cluster that cannot
    // start: a port already on record is drawn again.
    absl::StatusOr<int> port;
    for (int attempt = 0; attempt < kPortDraws; ++attempt) {
      port = options_.allocate_port();
      if (!port.ok()) break;
      absl::StatusOr<bool> recorded = store_->PortRecorded(*port);
      if (!recorded.ok()) port = recorded.status();
      if (!port.ok() || !*recorded) break;
      port = absl::ResourceExhaustedError(absl::StrCat("no port for replica ", std::string(replica),
                                                       ": ", kPortDraws,
                                                       " draws gave ports already on record"));
    }
    if (!port.ok()) {
      port_error = port.status();
      return 0;
    }
    if (absl::Status s = store_->PutPort(name, std::string(replica), *port); !s.ok())
      port_error = s;
    (*ports)[std::string(replica)] = *port;
    return *port;
  });
  const absl::Time now = options_.clock();
  core::ReconcileResult result = core::Reconcile(*job, observed, now, options);
  if (!port_error.ok()) return port_error;

  // 3. Carry it out (core::CarryOut fixes the order).
  JobSink sink(this, &*job, &*records, now);
  if (absl::Status s = core::CarryOut(result, sink); !s.ok()) return s;
  // Finished: one more sync sees whether the clean-up has ended everything.
  return true;
}

absl::Status Controller::ReadMetricFile(const std::string& job, const ReplicaRecord& record) {
  if (record.metric_path.empty() || record.key.trial_id.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<hypertune::HypertuneReport>> reports =
      followers_[record.metric_path].PollFile(record.metric_path);
  if (!reports.ok()) return absl::OkStatus();  // unreadable for now: read again next sync
  for (const hypertune::HypertuneReport& report : *reports) {
    core::MetricReport metric{report.global_step, report.metrics, report.final};
    absl::StatusOr<bool> added =
        store_->AddMetricReport(job, record.key.trial_id, report.key, metric);
    if (!added.ok()) return added.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Controller::AdvanceTerminations(const std::string& job) {
  const absl::Time now = options_.clock();
  bool pending = false;
  for (auto it = terminations_.begin(); it != terminations_.end();) {
    Termination& t = it->second;
    if (t.job != job) {
      ++it;
      continue;
    }
    if (!launcher_->Alive(t.id)) {
      // A SIGKILL of the supervisor's group leaves its container running.
      if (!t.container.empty()) {
        if (absl::Status s = RemoveContainer(options_.podman, t.container); !s.ok()) {
          return absl::Status(s.code(),
                              absl::StrCat("deleting replica ", it->first, ": ", s.message()));
        }
      }
      if (absl::Status s = ReadMetricFile(job, t.record); !s.ok()) return s;
      followers_.erase(t.record.metric_path);
      if (absl::Status s = store_->DeleteReplica(it->first); !s.ok()) return s;
      it = terminations_.erase(it);
      continue;
    }
    if (!t.killed && now >= t.kill_at) {
      if (absl::Status s = launcher_->ForceKill(t.id); !s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("killing replica ", it->first, ": ", s.message()));
      }
      t.killed = true;
    }
    pending = true;
    ++it;
  }
  return pending;
}

absl::Status Controller::CreateReplica(const v1::TrainingJob& job,
                                       const core::DesiredReplica& replica) {
  const std::string& name = job.metadata().name();
  const std::string job_dir = JobDir(options_.home, name);
  const std::string stem = TaskFileStem(replica.key);
  LaunchRequest request;
  request.name = replica.name;
  request.log_path = LogPath(options_.home, name, replica.key.trial_id, LogTaskName(replica.key));
  request.exit_path = absl::StrCat(job_dir, "/run/", replica.name, ".exit");
  request.state_path = absl::StrCat(job_dir, "/run/", replica.name, ".state");
  request.pid_path = absl::StrCat(job_dir, "/run/", replica.name, ".pid");
  request.restart_on_failure = replica.restart_policy == core::ContainerRestartPolicy::kOnFailure;
  request.env = replica.env;
  const std::string metric_path = absl::StrCat(job_dir, "/metrics/", stem, ".metrics");
  request.env.emplace_back("CLOUD_ML_HP_METRIC_FILE", metric_path);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(metric_path).parent_path(), ec);
  // A replica started again (recreated) reports into a fresh file.
  std::filesystem::remove(metric_path, ec);

  const v1::TrainingInput& input = job.spec().training_input();
  // A job that names its runtime runs on that runtime's Python (the local
  // catalog's entry, as the reconcile planned it); one that does not, on
  // options_.python.
  const bool names_runtime = !input.runtime_version().empty() || !input.python_version().empty();
  const std::string& python =
      names_runtime && !replica.python.empty() ? replica.python : options_.python;
  if (!replica.python_module.empty() && AnyToInstall(input.package_uris())) {
    // Files and URLs are installed by exec (python_module.h), into an
    // environment made from `python`, whose python3 the module runs on.
    request.argv = replica.command;
    request.argv[0] = options_.runtime_binary;
    if (request.argv.size() > 3 && request.argv[2] == "--python") {
      request.argv[3] = python;  // the runtime's, named by the plan
    } else {
      request.argv.insert(request.argv.begin() + 2, {"--python", python});
    }
  } else if (!replica.python_module.empty()) {
    request.argv = {python, "-m", input.python_module()};
    std::vector<std::string> paths(input.package_uris().begin(), input.package_uris().end());
    if (const char* existing = std::getenv("PYTHONPATH");
        existing != nullptr && *existing != '\0') {
      paths.push_back(existing);
    }
    request.env.emplace_back("PYTHONPATH", absl::StrJoin(paths, ":"));
  } else if (IsDefaultRuntimeCommand(replica.command)) {
    request.argv = {options_.runtime_binary, "train"};
  } else {
    request.argv = replica.command;
  }
  request.argv.insert(request.argv.end(), replica.args.begin(), replica.args.end());
  absl::Status runnable = absl::OkStatus();
  if (replica.command.empty()) {
    // No command: the image's entrypoint runs (api::RunsImageEntrypoint).
    if (options_.podman.empty()) {
      runnable = absl::FailedPreconditionError(absl::StrCat(
          "replica ", replica.name, " runs the entrypoint of image ", replica.image,
          ", and the local backend runs images with podman, which is not on PATH (nor named by "
          "KUBETRAIN_PODMAN)"));
    } else if (replica.resources.gpus > 0) {
      runnable = absl::FailedPreconditionError(absl::StrCat(
          "replica ", replica.name, " asks for ", replica.resources.gpus,
          " GPU(s) and runs the entrypoint of image ", replica.image,
          ": the local backend passes no GPU into a container; give containerCommand to run it "
          "as a process here, or submit the job to a cluster"));
    } else {
      request.argv = ContainerRunArgv(ContainerReplicaRun(job, replica, request, metric_path));
    }
  }

  ReplicaRecord record;
  record.name = replica.name;
  record.job = name;
  record.key = replica.key;
  record.log_path = request.log_path;
  record.exit_path = request.exit_path;
  record.state_path = request.state_path;
  record.pid_path = request.pid_path;
  record.metric_path = metric_path;
  record.created = options_.clock();
  // On record before it exists, so that a controller killed during the
  // launch finds it afterwards instead of starting it a second time.
  record.pid = kPidStarting;
  std::filesystem::remove(request.pid_path, ec);
  if (absl::Status s = store_->PutReplica(record); !s.ok()) return s;
  absl::StatusOr<ProcessId> id = runnable.ok() ? launcher_->Launch(request) : runnable;
  if (!id.ok()) {
    // Like a container that cannot start: the replica fails with exit code
    // 127 and the reason in its log, and the restart policy decides.
    std::filesystem::create_directories(std::filesystem::path(request.log_path).parent_path(), ec);
    std::filesystem::create_directories(std::filesystem::path(request.exit_path).parent_path(), ec);
    record.pid = 0;
    std::ofstream(request.log_path, std::ios::app)
        << absl::ToDoubleSeconds(options_.clock() - absl::UnixEpoch()) << " E "
        << id.status().message() << "\n";
  } else {
    record.pid = id->pid;
    record.start_ticks = id->start_ticks;
  }
  followers_.erase(metric_path);
  return store_->PutReplica(record);
}

ContainerRun Controller::ContainerReplicaRun(const v1::TrainingJob& job,
                                             const core::DesiredReplica& replica,
                                             const LaunchRequest& request,
                                             const std::string& metric_path) const {
  ContainerRun run;
  run.podman = options_.podman;
  run.name = ContainerName(options_.home, replica.name);
  run.image = replica.image;
  run.uid = getuid();
  run.gid = getgid();
  // Each name once, the last value being the one the supervisor sets.
  for (const auto& [name, value] : request.env) {
    if (std::find(run.env_names.begin(), run.env_names.end(), name) == run.env_names.end()) {
      run.env_names.push_back(name);
    }
  }
  // Where it reports: the controller follows that file.
  run.mounts.push_back(std::filesystem::path(metric_path).parent_path().string());
  // A jobDir on this machine: the trainer writes its checkpoints and
  // exports there (a gs:// or other URI is the trainer's business).
  const std::string& job_dir = job.spec().training_input().job_dir();
  if (absl::StartsWith(job_dir, "/")) {
    std::error_code ec;
    std::filesystem::create_directories(job_dir, ec);
    run.mounts.push_back(job_dir);
  }
  run.args = replica.args;
  return run;
}

absl::StatusOr<std::unique_ptr<ControllerLock>> ControllerLock::TryAcquire(
    const std::string& home) {
  std::error_code ec;
  std::filesystem::create_directories(home, ec);
  const std::string path = home + "/controller.lock";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    if (errno == EWOULDBLOCK) return nullptr;
    return absl::UnavailableError(absl::StrCat("cannot lock ", path, ": ", std::strerror(errno)));
  }
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is informative only; the lock is what counts.
  }
  return std::unique_ptr<ControllerLock>(new ControllerLock(fd));
}

bool ControllerLock::Held(const std::string& home) {
  const std::string path = home + "/controller.lock";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

ControllerLock::~ControllerLock() { close(fd_); }

int MachineGpuCount() {
  std::error_code error;
  int found = 0;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", error), end;
       !error && it != end; it.increment(error)) {
    ++found;
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    // CUDA stops at the first entry it cannot read ("-1" hides the rest).
    int listed = 0;
    for (absl::string_view entry : absl::StrSplit(visible, ',')) {
      entry = absl::StripAsciiWhitespace(entry);
      if (entry.empty() || absl::StartsWith(entry, "-")) break;
      ++listed;
    }
    found = std::min(found, listed);
  }
  return found;
}

}  // namespace kubetrain::local
