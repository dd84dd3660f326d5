#include "operator/local/job_store.h"

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <vector>

#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::local {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::TrainingJob Job(const std::string& name) {
  v1::TrainingJob job;
  job.set_api_version("kubetrain.io/v1");
  job.set_kind("TrainingJob");
  job.mutable_metadata()->set_name(name);
  job.mutable_metadata()->set_uid("uid-" + name);
  job.mutable_spec()->mutable_training_input()->add_args("--x=1");
  job.mutable_status()->set_state(v1::QUEUED);
  return job;
}

// Forks `count` processes that wait on one pipe, so that all of them are
// released at once when it closes, then run `body` with their index; its
// result is the process's exit code. Returns the exit codes (-1: no normal exit).
std::vector<int> RunInProcessesAtOnce(int count, const std::function<int(int)>& body) {
  int gate[2];
  if (pipe(gate) != 0) return {};
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      close(gate[1]);
      char byte;
      while (read(gate[0], &byte, 1) < 0 && errno == EINTR) {
      }
      _exit(body(i));
    }
    if (pid > 0) children.push_back(pid);
  }
  close(gate[0]);
  close(gate[1]);
  std::vector<int> codes;
  for (pid_t pid : children) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return codes;
}

TEST(JobStoreTest, CreateGetListAndDuplicate) {
  test_support::TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->CreateJob(Job("b_job")).ok());
  ASSERT_TRUE((*store)->CreateJob(Job("a_job")).ok());
  absl::Status dup = (*store)->CreateJob(Job("a_job"));
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(dup.message(), HasSubstr("a_job"));

  auto job = (*store)->GetJob("a_job");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->metadata().uid(), "uid-a_job");
  EXPECT_EQ(job->spec().training_input().args(0), "--x=1");
  EXPECT_EQ(job->status().state(), v1::QUEUED);
  EXPECT_FALSE(job->spec().cancel());

  auto jobs = (*store)->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].metadata().name(), "b_job");  // creation order
  EXPECT_EQ((*jobs)[1].metadata().name(), "a_job");

  auto missing = (*store)->GetJob("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope"));
}

TEST(JobStoreTest, NamesOfTheSameObjectNameAreTheSameJob) {
  test_support::TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->CreateJob(Job("Dup_x")).ok());
  for (const std::string name : {"dup-x", "DUP_X", "dup_x", "Dup_x"}) {
    absl::Status dup = (*store)->CreateJob(Job(name));
    EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists) << name;
    EXPECT_THAT(dup.message(), HasSubstr("[" + name + "]"));
    if (name != "Dup_x") {
      EXPECT_THAT(dup.message(), HasSubstr("[Dup_x]"));
    }
  }
  EXPECT_TRUE((*store)->CreateJob(Job("dup-y")).ok());
  auto jobs = (*store)->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].metadata().name(), "Dup_x");
}

// Racing submits of names that are the same job: the check and the insert
// are one transaction, so exactly one of them is created.
TEST(JobStoreTest, RacingSubmitsOfTheSameJobCreateOne) {
  test_support::TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  ASSERT_TRUE(JobStore::Open(path).ok());
  const std::vector<std::string> names = {"Race_j", "race-j", "RACE_J",
                                          "race_j", "Race-J", "rAce_j"};
  std::vector<int> codes = RunInProcessesAtOnce(static_cast<int>(names.size()), [&](int i) {
    auto store = JobStore::Open(path);
    if (!store.ok()) return 1;
    absl::Status s = (*store)->CreateJob(Job(names[i]));
    if (s.ok()) return 0;
    return s.code() == absl::StatusCode::kAlreadyExists ? 10 : 2;
  });
  ASSERT_EQ(codes.size(), names.size());
  EXPECT_EQ(std::count(codes.begin(), codes.end(), 0), 1);
  EXPECT_EQ(std::count(codes.begin(), codes.end(), 10), static_cast<int>(names.size()) - 1);
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
}

TEST(JobStoreTest, AReplicaRecordIsNeverTakenOverByAnotherJob) {
  test_support::TempDir dir;
  auto store = JobStore::Open(dir.path() + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  ReplicaRecord first;
  first.name = "dup-x-master-0";
  first.job = "Dup_x";
  first.pid = 100;
  ASSERT_TRUE((*store)->PutReplica(first).ok());
  first.pid = 101;  // the same job updating its own record
  ASSERT_TRUE((*store)->PutReplica(first).ok());
  ReplicaRecord other = first;
  other.job = "dup-x";
  other.pid = 200;
  absl::Status taken = (*store)->PutReplica(other);
  EXPECT_EQ(taken.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(taken.message(), HasSubstr("dup-x-master-0"));
  EXPECT_THAT(taken.message(), HasSubstr("[Dup_x]"));
  auto kept = (*store)->ListReplicas("Dup_x");
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ((*kept)[0].pid, 101);
  EXPECT_TRUE((*(*store)->ListReplicas("dup-x")).empty());
  // Every job's in one read, by job then name.
  ReplicaRecord second;
  second.name = "a-worker-0";
  second.job = "a";
  second.key.role = api::Role::kWorker;
  second.pid = 300;
  ASSERT_TRUE((*store)->PutReplica(second).ok());
  auto all = (*store)->ListAllReplicas();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "dup-x-master-0");  // job "Dup_x" sorts before "a"
  EXPECT_EQ((*all)[1].name, "a-worker-0");
  EXPECT_EQ((*all)[1].key.role, api::Role::kWorker);
  EXPECT_EQ((*all)[1].pid, 300);
}

TEST(JobStoreTest, StatusAndCancelAreSeparateWriters) {
  test_support::TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  auto controller = JobStore::Open(path);
  auto cli = JobStore::Open(path);
  ASSERT_TRUE(controller.ok() && cli.ok());
  ASSERT_TRUE((*cli)->CreateJob(Job("j")).ok());
  ASSERT_TRUE((*cli)->RequestCancel("j").ok());
  v1::TrainingJobStatus status;
  status.set_state(v1::RUNNING);
  ASSERT_TRUE((*controller)->UpdateStatus("j", status).ok());
  auto job = (*cli)->GetJob("j");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->status().state(), v1::RUNNING);
  EXPECT_TRUE(job->spec().cancel());  // not overwritten by the status write
  EXPECT_EQ((*cli)->RequestCancel("other").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*controller)->UpdateStatus("other", status).code(), absl::StatusCode::kNotFound);
}

TEST(JobStoreTest, ReplicasPortsMetricsArchiveEventsSurviveReopen) {
  test_support::TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->CreateJob(Job("j")).ok());
    ReplicaRecord r;
    r.name = "j-t3-worker-1";
    r.job = "j";
    r.key = {"3", api::Role::kWorker, 1};
    r.pid = 4242;
    r.start_ticks = 99;
    r.log_path = "/l";
    r.exit_path = "/e";
    r.state_path = "/s";
    r.metric_path = "/m";
    r.created = absl::FromUnixSeconds(1700000000);
    ASSERT_TRUE((*store)->PutReplica(r).ok());
    ASSERT_TRUE((*store)->PutPort("j", "j-t3-worker-1", 31000).ok());
    core::MetricReport report{10, {{"acc", 0.5}}};
    EXPECT_TRUE(*(*store)->AddMetricReport("j", "3", "k1", report));
    EXPECT_FALSE(*(*store)->AddMetricReport("j", "3", "k1", report));  // same report again
    report.step = 20;
    report.values["acc"] = 0.75;
    EXPECT_TRUE(*(*store)->AddMetricReport("j", "3", "k2", report));
    v1::HyperparameterOutput trial;
    trial.set_trial_id("2");
    trial.mutable_final_metric()->set_objective_value(0.25);
    ASSERT_TRUE((*store)->ArchiveTrial("j", trial).ok());
    ASSERT_TRUE(
        (*store)->AddEvent("j", {absl::FromUnixSeconds(5), "Warning", "ReplicaFailed", "m"}).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok());
  auto replicas = (*store)->ListReplicas("j");
  ASSERT_TRUE(replicas.ok());
  ASSERT_EQ(replicas->size(), 1u);
  const ReplicaRecord& r = (*replicas)[0];
  EXPECT_EQ(r.key, (core::ReplicaKey{"3", api::Role::kWorker, 1}));
  EXPECT_EQ(r.pid, 4242);
  EXPECT_EQ(r.start_ticks, 99u);
  EXPECT_EQ(r.metric_path, "/m");
  EXPECT_EQ(r.created, absl::FromUnixSeconds(1700000000));
  EXPECT_EQ((*(*store)->Ports("j")).at("j-t3-worker-1"), 31000);
  auto metrics = (*store)->MetricReports("j");
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->at("3").size(), 2u);
  EXPECT_EQ(metrics->at("3")[1].step, 20);
  EXPECT_DOUBLE_EQ(metrics->at("3")[1].values.at("acc"), 0.75);
  auto archived = (*store)->ArchivedTrials("j");
  ASSERT_TRUE(archived.ok());
  ASSERT_EQ(archived->size(), 1u);
  EXPECT_DOUBLE_EQ((*archived)[0].final_metric().objective_value(), 0.25);
  auto events = (*store)->Events("j");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].reason, "ReplicaFailed");
  ASSERT_TRUE((*store)->DeleteReplica("j-t3-worker-1").ok());
  ASSERT_TRUE((*store)->DeleteReplica("j-t3-worker-1").ok());  // gone already: fine
  EXPECT_TRUE((*(*store)->ListReplicas("j")).empty());
}

// What parallel `kubetrain` commands on an empty $KUBETRAIN_HOME do: every one
// creates the database, and none may fail with "database is locked".
TEST(JobStoreTest, ProcessesOpeningANewStoreAtOnceAllSucceed) {
  constexpr int kProcesses = 8;
  for (int round = 0; round < 3; ++round) {
    test_support::TempDir dir;
    const std::string path = dir.path() + "/jobs.db";
    std::vector<int> codes = RunInProcessesAtOnce(kProcesses, [&](int i) {
      auto store = JobStore::Open(path);
      if (!store.ok()) {
        fprintf(stderr, "process %d: open: %s\n", i, std::string(store.status().message()).c_str());
        return 1;
      }
      if (absl::Status s = (*store)->CreateJob(Job("job_" + std::to_string(i))); !s.ok()) {
        fprintf(stderr, "process %d: create: %s\n", i, std::string(s.message()).c_str());
        return 2;
      }
      return (*store)->ListJobs().ok() ? 0 : 3;
    });
    EXPECT_EQ(codes, std::vector<int>(kProcesses, 0)) << "round " << round;
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto jobs = (*store)->ListJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    EXPECT_EQ(jobs->size(), static_cast<size_t>(kProcesses)) << "round " << round;
  }
}

// A store written by the previous version (1: no final mark on metric
// reports) is upgraded in place; its reports read as not final, new ones
// keep their mark.
TEST(JobStoreTest, UpgradesAVersionOneStoreAndKeepsFinalMarks) {
  test_support::TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db,
                   "CREATE TABLE metrics (seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT "
                   "NULL, trial TEXT NOT NULL, report_key TEXT NOT NULL, step INTEGER NOT "
                   "NULL, values_json TEXT NOT NULL, UNIQUE (job, trial, report_key));"
                   "INSERT INTO metrics (job, trial, report_key, step, values_json) VALUES "
                   "('j', '1', 'old', 5, '{\"acc\": 0.25}');"
                   "PRAGMA user_version = 1;",
                   nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(
      *(*store)->AddMetricReport("j", "1", "new", core::MetricReport{9, {{"acc", 0.5}}, true}));
  auto reports = (*store)->MetricReports("j");
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_EQ(reports->at("1").size(), 2u);
  EXPECT_EQ(reports->at("1")[0].step, 5);
  EXPECT_FALSE(reports->at("1")[0].final);
  EXPECT_EQ(reports->at("1")[1].step, 9);
  EXPECT_TRUE(reports->at("1")[1].final);
  // Opened again: nothing to upgrade.
  store->reset();
  auto again = JobStore::Open(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->MetricReports("j")->at("1")[1].final);
}

TEST(JobStoreTest, RefusesNewerSchemaAndNonDatabase) {
  test_support::TempDir dir;
  const std::string path = dir.path() + "/jobs.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = JobStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path));

  const std::string junk = dir.path() + "/junk.db";
  FILE* f = fopen(junk.c_str(), "w");
  fputs("this is not a database, but long enough to look like a header......................", f);
  fclose(f);
  auto bad = JobStore::Open(junk);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(junk));
}

}  // namespace
}  // namespace kubetrain::local
