#include "operator/local/job_store.h"

#include <sqlite3.h>

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/codec.h"
#include "api/validation.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace kubetrain::local {
namespace {

// One prepared statement; finalized on destruction.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  Statement& Bind(int i, const std::string& text) {
    sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Bind(int i, int64_t value) {
    sqlite3_bind_int64(stmt_, i, value);
    return *this;
  }
  Statement& BindDouble(int i, double value) {
    sqlite3_bind_double(stmt_, i, value);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return rc_ = sqlite3_step(stmt_); }
  std::string Text(int col) const {
    const unsigned char* text = sqlite3_column_text(stmt_, col);
    return text == nullptr
               ? ""
               : std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, col));
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  int rc() const { return rc_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

absl::Status SqlError(sqlite3* db, const std::string& path, const std::string& what) {
  return absl::InternalError(
      absl::StrCat("job store ", path, ": ", what, ": ", sqlite3_errmsg(db)));
}

absl::Status Exec(sqlite3* db, const std::string& path, const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message == nullptr ? "" : message;
    sqlite3_free(message);
    return absl::InternalError(absl::StrCat("job store ", path, ": ", text));
  }
  return absl::OkStatus();
}

template <typename M>
absl::StatusOr<M> ParseJson(const std::string& json, const std::string& what) {
  M message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(json, &message, options);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrCat(what, ": stored JSON is unreadable: ", status.ToString()));
  }
  return message;
}

double UnixSecondsOf(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

// How long opening waits for other processes, as the busy timeout does.
constexpr int kBusyTimeoutMs = 10000;

// Turns on the WAL journal (a lasting property of the file). On a new file
// that several processes open at once, the switch can meet another one's
// lock in a way SQLite reports as busy at once, without calling the busy
// handler, so it is tried again here until the busy timeout has passed.
absl::Status UseWalJournal(sqlite3* db, const std::string& path) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(kBusyTimeoutMs);
  for (;;) {
    const int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return absl::OkStatus();
    if ((rc & 0xff) != SQLITE_BUSY || absl::Now() > deadline) {
      return SqlError(db, path, "turning on the WAL journal");
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// Runs `body` in a write transaction (BEGIN IMMEDIATE: the write lock is
// taken first, waiting out other writers, so what `body` reads cannot change
// before it writes). Commits when `body` succeeds, rolls back otherwise.
absl::Status InWriteTransaction(sqlite3* db, const std::string& path,
                                const std::function<absl::Status()>& body) {
  if (absl::Status s = Exec(db, path, "BEGIN IMMEDIATE"); !s.ok()) return s;
  if (absl::Status s = body(); !s.ok()) {
    Exec(db, path, "ROLLBACK").IgnoreError();
    return s;
  }
  if (absl::Status s = Exec(db, path, "COMMIT"); !s.ok()) {
    Exec(db, path, "ROLLBACK").IgnoreError();
    return s;
  }
  return absl::OkStatus();
}

// PRAGMA user_version, by a statement finalized before returning.
absl::StatusOr<int64_t> ReadSchemaVersion(sqlite3* db, const std::string& path) {
  Statement version(db, "PRAGMA user_version");
  if (!version.ok() || version.Step() != SQLITE_ROW) return SqlError(db, path, "reading version");
  return version.Int(0);
}

// FailedPrecondition naming the file when `found` is newer than this code.
absl::Status CheckSchemaVersion(const std::string& path, int64_t found) {
  if (found <= kSchemaVersion) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "job store ", path, " has schema version ", found, "; this kubetrain reads up to ",
      kSchemaVersion, ": upgrade kubetrain or use another KUBETRAIN_HOME"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string message = db == nullptr ? "out of memory" : sqlite3_errmsg(db);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open job store ", path, ": ", message));
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  std::unique_ptr<JobStore> store(new JobStore(db, path));
  if (absl::Status status = store->Migrate(); !status.ok()) return status;
  return store;
}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::Status JobStore::Migrate() {
  if (absl::Status s = UseWalJournal(db_, path_); !s.ok()) return s;
  if (absl::Status s = Exec(db_, path_, "PRAGMA synchronous=NORMAL"); !s.ok()) return s;
  // The usual case, an up-to-date store, needs no write lock. The statement
  // is finalized before any BEGIN: left open, it keeps a read transaction
  // that a later write cannot upgrade while another process writes, and
  // SQLite reports that deadlock as "database is locked" at once instead of
  // waiting out the busy timeout.
  absl::StatusOr<int64_t> found = ReadSchemaVersion(db_, path_);
  if (!found.ok()) return found.status();
  if (*found == kSchemaVersion) return absl::OkStatus();
  if (absl::Status s = CheckSchemaVersion(path_, *found); !s.ok()) return s;
  // Several commands may find a new store at once: each takes the write lock
  // (waiting for the others) and reads the version again under it, so the
  // first creates the tables and the others see them made.
  return InWriteTransaction(db_, path_, [&]() -> absl::Status {
    absl::StatusOr<int64_t> again = ReadSchemaVersion(db_, path_);
    if (!again.ok()) return again.status();
    if (absl::Status s = CheckSchemaVersion(path_, *again); !s.ok()) return s;
    if (*again == kSchemaVersion) return absl::OkStatus();
    if (*again < 1) {
      if (absl::Status s = Exec(db_, path_, R"sql(
    CREATE TABLE IF NOT EXISTS jobs (
      name TEXT PRIMARY KEY, uid TEXT NOT NULL, job_json TEXT NOT NULL,
      status_json TEXT NOT NULL DEFAULT '{}', cancel_requested INTEGER NOT NULL DEFAULT 0,
      created REAL NOT NULL, seq INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS replicas (
      name TEXT PRIMARY KEY, job TEXT NOT NULL, trial TEXT NOT NULL, role TEXT NOT NULL,
      idx INTEGER NOT NULL, pid INTEGER NOT NULL, start_ticks INTEGER NOT NULL,
      log_path TEXT NOT NULL, exit_path TEXT NOT NULL, state_path TEXT NOT NULL,
      pid_path TEXT NOT NULL, metric_path TEXT NOT NULL, created REAL NOT NULL);
    CREATE INDEX IF NOT EXISTS replicas_by_job ON replicas(job);
    CREATE TABLE IF NOT EXISTS ports (
      job TEXT NOT NULL, replica TEXT NOT NULL, port INTEGER NOT NULL,
      PRIMARY KEY (job, replica));
    CREATE TABLE IF NOT EXISTS metrics (
      seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, trial TEXT NOT NULL,
      report_key TEXT NOT NULL, step INTEGER NOT NULL, values_json TEXT NOT NULL,
      UNIQUE (job, trial, report_key));
    CREATE TABLE IF NOT EXISTS archived_trials (
      job TEXT NOT NULL, trial_id TEXT NOT NULL, trial_json TEXT NOT NULL,
      PRIMARY KEY (job, trial_id));
    CREATE TABLE IF NOT EXISTS events (
      seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, time REAL NOT NULL,
      type TEXT NOT NULL, reason TEXT NOT NULL, message TEXT NOT NULL);
    PRAGMA user_version = 1;
  )sql");
          !s.ok()) {
        return s;
      }
    }
    // Version 2: a metric report may be its trainer's final one (the
    // early-stopping rule no longer judges the trial).
    if (*again < 2) {
      if (absl::Status s =
              Exec(db_, path_, "ALTER TABLE metrics ADD COLUMN final INTEGER NOT NULL DEFAULT 0");
          !s.ok()) {
        return s;
      }
    }
    return Exec(db_, path_, "PRAGMA user_version = 2");
  });
}

absl::Status JobStore::CreateJob(const v1::TrainingJob& job) {
  const std::string& name = job.metadata().name();
  v1::TrainingJob spec_only = job;
  spec_only.clear_status();
  // Names that differ only in case and '_' versus '-' give the same object
  // and replica names, so they are one job. Checked under the write lock, so
  // that of two racing submits one sees the other's row.
  return InWriteTransaction(db_, path_, [&]() -> absl::Status {
    const std::string object_name = api::KubernetesName(name);
    Statement select(db_, "SELECT name FROM jobs");
    int rc;
    while ((rc = select.Step()) == SQLITE_ROW) {
      const std::string existing = select.Text(0);
      if (existing == name) {
        return absl::AlreadyExistsError(
            absl::StrCat("job [", name, "] already exists: pick another name"));
      }
      if (api::KubernetesName(existing) == object_name) {
        return absl::AlreadyExistsError(
            absl::StrCat("job [", name, "] already exists as [", existing,
                         "] (job names that differ only in case, '-' and '_' are the same job): "
                         "pick another name"));
      }
    }
    if (rc != SQLITE_DONE) return SqlError(db_, path_, "creating job " + name);
    Statement insert(db_,
                     "INSERT INTO jobs (name, uid, job_json, status_json, created, seq) VALUES "
                     "(?, ?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs))");
    insert.Bind(1, name)
        .Bind(2, job.metadata().uid())
        .Bind(3, api::EncodeJson(spec_only))
        .Bind(4, api::EncodeJson(job.status()))
        .BindDouble(5, UnixSecondsOf(absl::Now()));
    if (insert.Step() != SQLITE_DONE) return SqlError(db_, path_, "creating job " + name);
    return absl::OkStatus();
  });
}

namespace {
absl::StatusOr<v1::TrainingJob> JobFromRow(const Statement& row) {
  const std::string name = row.Text(0);
  auto job = ParseJson<v1::TrainingJob>(row.Text(1), "job " + name);
  if (!job.ok()) return job.status();
  auto status = ParseJson<v1::TrainingJobStatus>(row.Text(2), "status of job " + name);
  if (!status.ok()) return status.status();
  *job->mutable_status() = *std::move(status);
  if (row.Int(3) != 0) job->mutable_spec()->set_cancel(true);
  return job;
}
}  // namespace

absl::StatusOr<v1::TrainingJob> JobStore::GetJob(const std::string& name) {
  Statement select(db_,
                   "SELECT name, job_json, status_json, cancel_requested FROM jobs WHERE name = ?");
  select.Bind(1, name);
  const int rc = select.Step();
  if (rc == SQLITE_DONE) {
    return absl::NotFoundError(
        absl::StrCat("job [", name, "] not found (jobs are listed by `kubetrain jobs list`)"));
  }
  if (rc != SQLITE_ROW) return SqlError(db_, path_, "reading job " + name);
  return JobFromRow(select);
}

absl::StatusOr<std::vector<v1::TrainingJob>> JobStore::ListJobs() {
  Statement select(db_,
                   "SELECT name, job_json, status_json, cancel_requested FROM jobs ORDER BY seq");
  std::vector<v1::TrainingJob> jobs;
  int rc;
  while ((rc = select.Step()) == SQLITE_ROW) {
    auto job = JobFromRow(select);
    if (!job.ok()) return job.status();
    jobs.push_back(*std::move(job));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, path_, "listing jobs");
  return jobs;
}

absl::Status JobStore::UpdateStatus(const std::string& name, const v1::TrainingJobStatus& status) {
  Statement update(db_, "UPDATE jobs SET status_json = ? WHERE name = ?");
  update.Bind(1, api::EncodeJson(status)).Bind(2, name);
  if (update.Step() != SQLITE_DONE) return SqlError(db_, path_, "writing status of job " + name);
  if (sqlite3_changes(db_) == 0)
    return absl::NotFoundError(absl::StrCat("job [", name, "] not found"));
  return absl::OkStatus();
}

absl::Status JobStore::RequestCancel(const std::string& name) {
  Statement update(db_, "UPDATE jobs SET cancel_requested = 1 WHERE name = ?");
  update.Bind(1, name);
  if (update.Step() != SQLITE_DONE) return SqlError(db_, path_, "cancelling job " + name);
  if (sqlite3_changes(db_) == 0)
    return absl::NotFoundError(absl::StrCat("job [", name, "] not found"));
  return absl::OkStatus();
}

absl::Status JobStore::PutReplica(const ReplicaRecord& r) {
  // A record of the same name but another job is left alone: replacing it
  // would lose that job's process, which nothing would then stop or watch.
  Statement insert(db_,
                   "INSERT INTO replicas (name, job, trial, role, idx, pid, start_ticks, "
                   "log_path, exit_path, state_path, pid_path, metric_path, created) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                   "ON CONFLICT (name) DO UPDATE SET trial = excluded.trial, role = excluded.role, "
                   "idx = excluded.idx, pid = excluded.pid, start_ticks = excluded.start_ticks, "
                   "log_path = excluded.log_path, exit_path = excluded.exit_path, "
                   "state_path = excluded.state_path, pid_path = excluded.pid_path, "
                   "metric_path = excluded.metric_path, created = excluded.created "
                   "WHERE replicas.job = excluded.job");
  insert.Bind(1, r.name)
      .Bind(2, r.job)
      .Bind(3, r.key.trial_id)
      .Bind(4, std::string(api::RoleName(r.key.role)))
      .Bind(5, r.key.index)
      .Bind(6, r.pid)
      .Bind(7, static_cast<int64_t>(r.start_ticks))
      .Bind(8, r.log_path)
      .Bind(9, r.exit_path)
      .Bind(10, r.state_path)
      .Bind(11, r.pid_path)
      .Bind(12, r.metric_path)
      .BindDouble(13, UnixSecondsOf(r.created));
  if (insert.Step() != SQLITE_DONE) return SqlError(db_, path_, "recording replica " + r.name);
  if (sqlite3_changes(db_) == 0) {
    Statement owner(db_, "SELECT job FROM replicas WHERE name = ?");
    owner.Bind(1, r.name);
    const std::string other = owner.Step() == SQLITE_ROW ? owner.Text(0) : "";
    return absl::AlreadyExistsError(absl::StrCat("replica ", r.name, " of job [", r.job,
                                                 "] is already recorded for job [", other, "]"));
  }
  return absl::OkStatus();
}

namespace {

constexpr char kSelectReplicas[] =
    "SELECT name, job, trial, role, idx, pid, start_ticks, log_path, exit_path, state_path, "
    "pid_path, metric_path, created FROM replicas";

// The rows of a kSelectReplicas query; `what` names it in errors.
absl::StatusOr<std::vector<ReplicaRecord>> ReadReplicas(sqlite3* db, const std::string& path,
                                                        Statement& select,
                                                        const std::string& what) {
  std::vector<ReplicaRecord> records;
  int rc;
  while ((rc = select.Step()) == SQLITE_ROW) {
    ReplicaRecord r;
    r.name = select.Text(0);
    r.job = select.Text(1);
    r.key.trial_id = select.Text(2);
    std::optional<api::Role> role = api::RoleFromName(select.Text(3));
    if (!role.has_value()) {
      return absl::DataLossError(absl::StrCat("job store ", path, ": replica ", r.name,
                                              " has unknown role \"", select.Text(3), "\""));
    }
    r.key.role = *role;
    r.key.index = select.Int(4);
    r.pid = static_cast<int>(select.Int(5));
    r.start_ticks = static_cast<uint64_t>(select.Int(6));
    r.log_path = select.Text(7);
    r.exit_path = select.Text(8);
    r.state_path = select.Text(9);
    r.pid_path = select.Text(10);
    r.metric_path = select.Text(11);
    r.created = absl::UnixEpoch() + absl::Seconds(select.Double(12));
    records.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return SqlError(db, path, what);
  return records;
}

}  // namespace

absl::StatusOr<std::vector<ReplicaRecord>> JobStore::ListReplicas(const std::string& job) {
  Statement select(db_, absl::StrCat(kSelectReplicas, " WHERE job = ? ORDER BY name").c_str());
  select.Bind(1, job);
  return ReadReplicas(db_, path_, select, "listing replicas of job " + job);
}

absl::StatusOr<std::vector<ReplicaRecord>> JobStore::ListAllReplicas() {
  Statement select(db_, absl::StrCat(kSelectReplicas, " ORDER BY job, name").c_str());
  return ReadReplicas(db_, path_, select, "listing replicas");
}

absl::Status JobStore::DeleteReplica(const std::string& name) {
  Statement del(db_, "DELETE FROM replicas WHERE name = ?");
  del.Bind(1, name);
  if (del.Step() != SQLITE_DONE) return SqlError(db_, path_, "deleting replica " + name);
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, int>> JobStore::Ports(const std::string& job) {
  Statement select(db_, "SELECT replica, port FROM ports WHERE job = ?");
  select.Bind(1, job);
  std::map<std::string, int> ports;
  int rc;
  while ((rc = select.Step()) == SQLITE_ROW)
    ports[select.Text(0)] = static_cast<int>(select.Int(1));
  if (rc != SQLITE_DONE) return SqlError(db_, path_, "reading ports of job " + job);
  return ports;
}

absl::Status JobStore::PutPort(const std::string& job, const std::string& replica, int port) {
  Statement insert(db_, "INSERT OR REPLACE INTO ports (job, replica, port) VALUES (?, ?, ?)");
  insert.Bind(1, job).Bind(2, replica).Bind(3, port);
  if (insert.Step() != SQLITE_DONE) return SqlError(db_, path_, "recording port of " + replica);
  return absl::OkStatus();
}

absl::StatusOr<bool> JobStore::PortRecorded(int port) {
  Statement select(db_, "SELECT 1 FROM ports WHERE port = ? LIMIT 1");
  select.Bind(1, static_cast<int64_t>(port));
  const int rc = select.Step();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    return SqlError(db_, path_, absl::StrCat("looking up port ", port));
  }
  return rc == SQLITE_ROW;
}

absl::StatusOr<bool> JobStore::AddMetricReport(const std::string& job, const std::string& trial_id,
                                               const std::string& report_key,
                                               const core::MetricReport& report) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& [tag, value] : report.values) values[tag] = value;
  Statement insert(
      db_,
      "INSERT OR IGNORE INTO metrics (job, trial, report_key, step, values_json, final) "
      "VALUES (?, ?, ?, ?, ?, ?)");
  insert.Bind(1, job)
      .Bind(2, trial_id)
      .Bind(3, report_key)
      .Bind(4, report.step)
      .Bind(5, values.dump())
      .Bind(6, static_cast<int64_t>(report.final ? 1 : 0));
  if (insert.Step() != SQLITE_DONE) {
    return SqlError(db_, path_,
                    absl::StrCat("recording a metric of job ", job, " trial ", trial_id));
  }
  return sqlite3_changes(db_) > 0;
}

absl::StatusOr<std::map<std::string, std::vector<core::MetricReport>>> JobStore::MetricReports(
    const std::string& job) {
  Statement select(
      db_, "SELECT trial, step, values_json, final FROM metrics WHERE job = ? ORDER BY seq");
  select.Bind(1, job);
  std::map<std::string, std::vector<core::MetricReport>> reports;
  int rc;
  while ((rc = select.Step()) == SQLITE_ROW) {
    core::MetricReport report;
    report.step = select.Int(1);
    report.final = select.Int(3) != 0;
    nlohmann::json values = nlohmann::json::parse(select.Text(2), nullptr, false);
    if (values.is_object()) {
      for (const auto& [tag, value] : values.items()) {
        if (value.is_number()) report.values[tag] = value.get<double>();
      }
    }
    reports[select.Text(0)].push_back(std::move(report));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, path_, "reading metrics of job " + job);
  return reports;
}

absl::Status JobStore::ArchiveTrial(const std::string& job, const v1::HyperparameterOutput& trial) {
  Statement insert(
      db_, "INSERT OR REPLACE INTO archived_trials (job, trial_id, trial_json) VALUES (?, ?, ?)");
  insert.Bind(1, job).Bind(2, trial.trial_id()).Bind(3, api::EncodeJson(trial));
  if (insert.Step() != SQLITE_DONE)
    return SqlError(db_, path_, "archiving trial " + trial.trial_id());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::HyperparameterOutput>> JobStore::ArchivedTrials(
    const std::string& job) {
  Statement select(
      db_,
      "SELECT trial_json FROM archived_trials WHERE job = ? ORDER BY CAST(trial_id AS INTEGER)");
  select.Bind(1, job);
  std::vector<v1::HyperparameterOutput> trials;
  int rc;
  while ((rc = select.Step()) == SQLITE_ROW) {
    auto trial =
        ParseJson<v1::HyperparameterOutput>(select.Text(0), "archived trial of job " + job);
    if (!trial.ok()) return trial.status();
    trials.push_back(*std::move(trial));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, path_, "reading archived trials of job " + job);
  return trials;
}

absl::Status JobStore::AddEvent(const std::string& job, const StoredEvent& event) {
  Statement insert(db_,
                   "INSERT INTO events (job, time, type, reason, message) VALUES (?, ?, ?, ?, ?)");
  insert.Bind(1, job)
      .BindDouble(2, UnixSecondsOf(event.time))
      .Bind(3, event.type)
      .Bind(4, event.reason)
      .Bind(5, event.message);
  if (insert.Step() != SQLITE_DONE) return SqlError(db_, path_, "recording an event of job " + job);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StoredEvent>> JobStore::Events(const std::string& job) {
  Statement select(db_,
                   "SELECT time, type, reason, message FROM events WHERE job = ? ORDER BY seq");
  select.Bind(1, job);
  std::vector<StoredEvent> events;
  int rc;
  while ((rc = select.Step()) == SQLITE_ROW) {
    events.push_back({absl::UnixEpoch() + absl::Seconds(select.Double(0)), select.Text(1),
                      select.Text(2), select.Text(3)});
  }
  if (rc != SQLITE_DONE) return SqlError(db_, path_, "reading events of job " + job);
  return events;
}

}  // namespace kubetrain::local
