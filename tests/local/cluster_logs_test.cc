// `kubetrain jobs stream-logs` and `submit --stream-logs` on the cluster
// backend: container logs read through the (fake) API server's pods/log, as a
// user would see them. Pods, their logs and the job's state are set by the
// test, as the kubelet and the operator would.
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <streambuf>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/validation.h"
#include "cli/jobs_cluster.h"
#include "cli/ui/cluster_job_source.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/core/naming.h"
#include "operator/kube/rest_client.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::cli {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kNs[] = "team-a";

// An ostream that many threads may write while the test reads it.
class SharedOutput : public std::streambuf {
 public:
  std::string Text() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    std::lock_guard<std::mutex> lock(mu_);
    text_.push_back(static_cast<char>(c));
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard<std::mutex> lock(mu_);
    text_.append(s, static_cast<size_t>(n));
    return n;
  }

 private:
  std::mutex mu_;
  std::string text_;
};

// One printed log line, split at its tabs.
struct Entry {
  std::string severity, time, task, trial, message;
};

std::vector<Entry> Entries(const std::string& text) {
  std::vector<Entry> entries;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits('\t', 4));
    if (f.size() == 5) entries.push_back({f[0], f[1], f[2], f[3], f[4]});
  }
  return entries;
}

// The messages of `task` (and `trial`), in the order printed.
std::vector<std::string> Messages(const std::string& text, const std::string& task,
                                  const std::string& trial = "") {
  std::vector<std::string> out;
  for (const Entry& e : Entries(text)) {
    if (e.task == task && e.trial == trial) out.push_back(e.message);
  }
  return out;
}

class ClusterLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = FakeApiServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    kube::ClusterConfig config;
    config.server = server_->url();
    auto client = kube::RestClusterClient::Create(config);
    ASSERT_TRUE(client.ok()) << client.status();
    jobs_ = std::make_unique<ClusterJobs>(*std::move(client), kNs);
  }
  void TearDown() override {
    if (!follow_.joinable()) return;
    // A failed assertion left the follow open: ending the job ends it.
    if (!follow_done_) SetState(followed_id_, "CANCELLED");
    follow_.join();
  }

  // The job as `jobs submit` creates it, RUNNING as the operator would say.
  std::string SubmitJob(const std::string& id) {
    v1::TrainingJob job;
    job.set_api_version("kubetrain.io/v1");
    job.set_kind("TrainingJob");
    job.mutable_metadata()->set_name(id);
    job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::BASIC);
    EXPECT_TRUE(jobs_->Create(job).ok());
    SetState(id, "RUNNING");
    auto object = server_->Get("trainingjobs", kNs, api::KubernetesName(id));
    return object.ok() ? (*object)["metadata"].value("uid", "") : "";
  }
  void SetState(const std::string& id, const std::string& state) {
    ASSERT_TRUE(server_
                    ->MergePatch("trainingjobs", kNs, api::KubernetesName(id),
                                 {{"status", {{"state", state}}}}, "status")
                    .ok());
  }
  // A replica pod as the operator names and labels it.
  void CreatePod(const std::string& id, const core::ReplicaKey& key) {
    const std::string job = api::KubernetesName(id);
    json labels = json::object();
    for (const auto& [k, v] : core::ReplicaLabels(job, key)) labels[k] = v;
    json pod = {{"metadata", {{"name", core::ReplicaName(job, key)}, {"labels", labels}}},
                {"spec", {{"containers", {{{"name", "kubetrain"}, {"image", "trainer"}}}}}}};
    ASSERT_TRUE(server_->Create("pods", kNs, pod).ok());
  }
  void SetPhase(const std::string& pod, const std::string& phase) {
    ASSERT_TRUE(
        server_->MergePatch("pods", kNs, pod, {{"status", {{"phase", phase}}}}, "status").ok());
  }
  void Start(const std::string& pod) {
    ASSERT_TRUE(server_->StartContainer(kNs, pod, "kubetrain").ok()) << pod;
  }
  void Log(const std::string& pod, const std::string& text) {
    ASSERT_TRUE(server_->AppendLog(kNs, pod, "kubetrain", text).ok()) << pod;
  }
  void Stop(const std::string& pod) {
    ASSERT_TRUE(server_->StopContainer(kNs, pod, "kubetrain").ok()) << pod;
  }
  void RecordEvent(const std::string& job_uid, const std::string& job, const std::string& type,
                   const std::string& reason, const std::string& message) {
    static int n = 0;
    json event = {{"metadata", {{"name", absl::StrCat(job, ".", ++n)}}},
                  {"involvedObject",
                   {{"kind", "TrainingJob"}, {"name", job}, {"namespace", kNs}, {"uid", job_uid}}},
                  {"type", type},
                  {"reason", reason},
                  {"message", message},
                  {"lastTimestamp", "2027-01-15T08:00:00Z"}};
    ASSERT_TRUE(server_->Create("events", kNs, event).ok());
  }

  // Follows `id` on a thread; the result lands in `followed_`.
  void Follow(const std::string& id, ClusterLogOptions options) {
    followed_id_ = id;
    follow_ = std::thread([this, id, options] {
      std::ostream out(&output_);
      followed_ = jobs_->FollowLogs(id, options, out);
      follow_done_ = true;
    });
  }
  // The job has ended: the follow returns, with the job.
  void JoinFollow() {
    ASSERT_TRUE(test_support::WaitUntil([&] { return follow_done_.load(); }, absl::Seconds(30)))
        << Text();
    follow_.join();
    ASSERT_TRUE(followed_.ok()) << followed_.status();
  }
  bool Printed(const std::string& task, size_t lines, const std::string& trial = "") {
    return test_support::WaitUntil(
        [&] { return Messages(output_.Text(), task, trial).size() >= lines; });
  }
  std::string Text() { return output_.Text(); }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<ClusterJobs> jobs_;
  SharedOutput output_;
  std::thread follow_;
  std::string followed_id_;
  std::atomic<bool> follow_done_{false};
  absl::StatusOr<v1::TrainingJob> followed_ = absl::UnknownError("not run");
};

ClusterLogOptions Fast() {
  ClusterLogOptions options;
  options.poll_interval = absl::Milliseconds(100);
  options.drain = absl::Milliseconds(500);
  return options;
}

TEST_F(ClusterLogsTest, EveryReplicaInOrderThroughRestartsAndNewPodsUntilTheJobEnds) {
  const std::string uid = SubmitJob("mnist_logs");
  CreatePod("mnist_logs", {"", api::Role::kMaster, 0});
  CreatePod("mnist_logs", {"", api::Role::kWorker, 0});
  Follow("mnist_logs", Fast());

  // The master writes while the follow is open; the worker has not started.
  Start("mnist-logs-master-0");
  SetPhase("mnist-logs-master-0", "Running");
  Log("mnist-logs-master-0", "master 1\nmaster 2");
  ASSERT_TRUE(Printed("master-replica-0", 2)) << Text();
  Start("mnist-logs-worker-0");
  Log("mnist-logs-worker-0", "worker 1");
  Log("mnist-logs-master-0", "master 3");
  ASSERT_TRUE(Printed("worker-replica-0", 1)) << Text();

  // A dropped connection: the follow resumes where it was, repeating nothing.
  server_->DropLogStreams();
  Log("mnist-logs-master-0", "master 4");
  Log("mnist-logs-worker-0", "worker 2");
  ASSERT_TRUE(Printed("master-replica-0", 4)) << Text();

  // The worker's container crashes and is restarted in place: the rest of
  // its first run, then its second run, in order.
  Log("mnist-logs-worker-0", "Traceback (most recent call last):");
  Start("mnist-logs-worker-0");
  Log("mnist-logs-worker-0", "worker 4 after the restart");
  ASSERT_TRUE(Printed("worker-replica-0", 4)) << Text();

  // A pod that appears later (a replacement, a new trial) is followed too.
  CreatePod("mnist_logs", {"", api::Role::kWorker, 1});
  Start("mnist-logs-worker-1");
  Log("mnist-logs-worker-1", "late worker");
  ASSERT_TRUE(Printed("worker-replica-1", 1)) << Text();

  // The job's events: the operator's story, as "service" lines.
  RecordEvent(uid, "mnist-logs", "Warning", "Unschedulable", "worker-1 cannot be scheduled");
  RecordEvent("another-uid", "mnist-logs", "Normal", "Old", "a deleted job of the same name");
  ASSERT_TRUE(Printed("service", 1)) << Text();

  // The master ends, then the job; the running worker is not waited for
  // longer than the drain.
  Log("mnist-logs-master-0", "master 5, the last");
  Stop("mnist-logs-master-0");
  SetPhase("mnist-logs-master-0", "Succeeded");
  SetState("mnist_logs", "SUCCEEDED");
  ASSERT_NO_FATAL_FAILURE(JoinFollow());
  EXPECT_EQ(followed_->status().state(), v1::SUCCEEDED);

  const std::string text = Text();
  EXPECT_THAT(Messages(text, "master-replica-0"),
              ElementsAre("master 1", "master 2", "master 3", "master 4", "master 5, the last"));
  EXPECT_THAT(Messages(text, "worker-replica-0"),
              ElementsAre("worker 1", "worker 2",
                          "Traceback (most recent call last):", "worker 4 after the restart"));
  EXPECT_THAT(Messages(text, "worker-replica-1"), ElementsAre("late worker"));
  EXPECT_THAT(Messages(text, "service"),
              ElementsAre("Unschedulable: worker-1 cannot be scheduled"));
  // The local backend's format: severity, UTC time, task, trial, message.
  for (const Entry& e : Entries(text)) {
    EXPECT_THAT(e.time, ::testing::MatchesRegex("20[0-9][0-9]-[0-9][0-9]-[0-9][0-9] "
                                                "[0-9][0-9]:[0-9][0-9]:[0-9][0-9] \\+0000"));
    EXPECT_EQ(e.severity, absl::StartsWith(e.message, "Traceback") ? "ERROR"
                          : e.task == "service"                    ? "WARNING"
                                                                   : "INFO")
        << e.message;
  }
  EXPECT_EQ(Entries(text).size(), 11u) << text;  // nothing else, nothing twice
}

// The follower reads the previous run (none), then asks to follow the
// current one; in between, the container writes, crashes and is restarted.
// The follow request then reads the new run, and the end of the old one
// must still come first.
TEST_F(ClusterLogsTest, ARestartBetweenTwoReadsLosesNothingOfTheEarlierRun) {
  SubmitJob("restarts");
  CreatePod("restarts", {"", api::Role::kWorker, 0});
  Start("restarts-worker-0");
  SetPhase("restarts-worker-0", "Running");
  Log("restarts-worker-0", "run 1 line 1");
  Follow("restarts", Fast());
  ASSERT_TRUE(Printed("worker-replica-0", 1)) << Text();

  std::atomic<bool> restarted{false};
  server_->BeforeLogRequests(
      [&](const std::string& pod, const std::map<std::string, std::string>& query) {
        auto follow = query.find("follow");
        if (pod != "restarts-worker-0" || follow == query.end() || follow->second != "true" ||
            restarted.exchange(true)) {
          return;
        }
        Log("restarts-worker-0", "run 1 line 2\nTraceback (most recent call last):");
        Start("restarts-worker-0");
        Log("restarts-worker-0", "run 2 line 1");
      });
  server_->DropLogStreams();  // the follower reconnects: previous, then follow
  ASSERT_TRUE(Printed("worker-replica-0", 4)) << Text();
  EXPECT_TRUE(restarted);
  server_->BeforeLogRequests(nullptr);

  Log("restarts-worker-0", "run 2 line 2");
  Stop("restarts-worker-0");
  SetPhase("restarts-worker-0", "Succeeded");
  SetState("restarts", "SUCCEEDED");
  ASSERT_NO_FATAL_FAILURE(JoinFollow());
  EXPECT_THAT(Messages(Text(), "worker-replica-0"),
              ElementsAre("run 1 line 1", "run 1 line 2",
                          "Traceback (most recent call last):", "run 2 line 1", "run 2 line 2"));
}

TEST_F(ClusterLogsTest, TaskAndTrialFiltersPickTheReplicas) {
  SubmitJob("study");
  for (const std::string trial : {"1", "2"}) {
    CreatePod("study", {trial, api::Role::kMaster, 0});
    CreatePod("study", {trial, api::Role::kWorker, 0});
    for (const std::string role : {"master", "worker"}) {
      const std::string pod = absl::StrCat("study-t", trial, "-", role, "-0");
      Start(pod);
      Log(pod, absl::StrCat(role, " of trial ", trial));
      Stop(pod);
      SetPhase(pod, "Succeeded");
    }
  }
  SetState("study", "SUCCEEDED");  // ended: what is there is printed, then it returns

  ClusterLogOptions trial = Fast();
  trial.trial_filter = "2";
  std::ostringstream out;
  auto job = jobs_->FollowLogs("study", trial, out);
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<std::string> printed;
  for (const Entry& e : Entries(out.str()))
    printed.push_back(e.task + " " + e.trial + " " + e.message);
  std::sort(printed.begin(), printed.end());
  EXPECT_THAT(printed, ElementsAre("master-replica-0 2 master of trial 2",
                                   "worker-replica-0 2 worker of trial 2"));

  ClusterLogOptions task = Fast();
  task.task_filter = "master-replica-0";
  std::ostringstream masters;
  ASSERT_TRUE(jobs_->FollowLogs("study", task, masters).ok());
  printed.clear();
  for (const Entry& e : Entries(masters.str()))
    printed.push_back(e.task + " " + e.trial + " " + e.message);
  std::sort(printed.begin(), printed.end());
  EXPECT_THAT(printed, ElementsAre("master-replica-0 1 master of trial 1",
                                   "master-replica-0 2 master of trial 2"));

  auto missing = jobs_->FollowLogs("nope", Fast(), out);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("job [nope] not found in namespace team-a"));
}

// Pods that ended have all their lines there to read: a slow API server
// (each request longer than the drain) loses none of them; only containers
// still running are cut off after the drain.
TEST_F(ClusterLogsTest, EndedPodsArePrintedWholeFromASlowApiServer) {
  SubmitJob("slow");
  CreatePod("slow", {"", api::Role::kMaster, 0});
  CreatePod("slow", {"", api::Role::kWorker, 0});
  for (const std::string pod : {"slow-master-0", "slow-worker-0"}) {
    Start(pod);
    Log(pod, pod + " line 1\n" + pod + " line 2");
    Stop(pod);
    SetPhase(pod, "Succeeded");
  }
  SetState("slow", "SUCCEEDED");
  server_->SetLatency(absl::Milliseconds(300));

  ClusterLogOptions options = Fast();
  options.drain = absl::Milliseconds(100);
  std::ostringstream out;
  auto job = jobs_->FollowLogs("slow", options, out);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(Messages(out.str(), "master-replica-0"),
              ElementsAre("slow-master-0 line 1", "slow-master-0 line 2"));
  EXPECT_THAT(Messages(out.str(), "worker-replica-0"),
              ElementsAre("slow-worker-0 line 1", "slow-worker-0 line 2"));
}

TEST_F(ClusterLogsTest, ACrashLoopShowsEachRunOnce) {
  SubmitJob("crashy");
  CreatePod("crashy", {"", api::Role::kMaster, 0});
  // Three runs crashed before anyone looked: the kubelet keeps the last
  // terminated one (previous) and the current one, so the first is gone.
  Start("crashy-master-0");
  Log("crashy-master-0", "run 1");
  Start("crashy-master-0");
  Log("crashy-master-0", "run 2");
  Start("crashy-master-0");
  Log("crashy-master-0", "run 3\nValueError: bad flag");
  Stop("crashy-master-0");
  SetPhase("crashy-master-0", "Running");  // CrashLoopBackOff: waiting to run again
  Follow("crashy", Fast());
  ASSERT_TRUE(Printed("master-replica-0", 3)) << Text();
  Start("crashy-master-0");
  Log("crashy-master-0", "run 4");
  ASSERT_TRUE(Printed("master-replica-0", 4)) << Text();
  Stop("crashy-master-0");
  SetPhase("crashy-master-0", "Failed");
  SetState("crashy", "FAILED");
  ASSERT_NO_FATAL_FAILURE(JoinFollow());
  EXPECT_EQ(followed_->status().state(), v1::FAILED);
  EXPECT_THAT(Messages(Text(), "master-replica-0"),
              ElementsAre("run 2", "run 3", "ValueError: bad flag", "run 4"));
}

// The real binary, as a user runs it: -n picks the namespace, submit
// --stream-logs prints the job's state changes, events and logs.
// `kubetrain ui` on a cluster reads the replicas' logs as stream-logs does:
// one stream per replica pod (a study's by trial), the current run of its
// container by byte offset, each line with the kubelet's time.
TEST_F(ClusterLogsTest, TheDashboardReadsReplicaLogsThroughTheApi) {
  SubmitJob("dash");
  CreatePod("dash", {"", api::Role::kMaster, 0});
  CreatePod("dash", {"", api::Role::kWorker, 0});
  kube::ClusterConfig config;
  config.server = server_->url();
  auto client = kube::RestClusterClient::Create(config);
  ASSERT_TRUE(client.ok()) << client.status();
  ui::ClusterJobSource source(std::make_unique<ClusterJobs>(*std::move(client), kNs));

  absl::StatusOr<std::vector<ui::LogStream>> streams = source.LogStreams("dash");
  ASSERT_TRUE(streams.ok()) << streams.status();
  EXPECT_EQ(*streams,
            (std::vector<ui::LogStream>{{"", "master-replica-0"}, {"", "worker-replica-0"}}));

  // Not started yet: nothing to read, not an error.
  absl::StatusOr<ui::LogChunk> chunk = source.ReadLog("dash", {"", "master-replica-0"}, 0, 100);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_TRUE(chunk->lines.empty());

  Start("dash-master-0");
  Log("dash-master-0", "step 1: loss 2.3\nTraceback (most recent call last):");
  chunk = source.ReadLog("dash", {"", "master-replica-0"}, 0, 100);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  ASSERT_EQ(chunk->lines.size(), 2u);
  EXPECT_EQ(chunk->lines[0].message, "step 1: loss 2.3");
  EXPECT_EQ(chunk->lines[0].severity, "INFO");
  EXPECT_GT(chunk->lines[0].time, 1.7e9);  // the kubelet's stamp
  EXPECT_EQ(chunk->lines[1].severity, "ERROR");
  // From where it stopped: only what is new.
  Log("dash-master-0", "step 2: loss 1.9");
  absl::StatusOr<ui::LogChunk> next =
      source.ReadLog("dash", {"", "master-replica-0"}, chunk->next_offset, 100);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ(next->lines.size(), 1u);
  EXPECT_EQ(next->lines[0].message, "step 2: loss 1.9");
  // A tail.
  absl::StatusOr<ui::LogChunk> tail = source.ReadLog("dash", {"", "master-replica-0"}, -1, 1);
  ASSERT_TRUE(tail.ok()) << tail.status();
  ASSERT_EQ(tail->lines.size(), 1u);
  EXPECT_EQ(tail->lines[0].message, "step 2: loss 1.9");
  EXPECT_TRUE(tail->truncated);

  // Only the job's own replicas are read.
  EXPECT_EQ(source.ReadLog("dash", {"", "evaluator-replica-0"}, 0, 10).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ClusterLogsTest, TheCliStreamsAndSubmitStreamsOnACluster) {
  test_support::TempDir dir;
  const std::string kubeconfig = dir.path() + "/config";
  std::ofstream(kubeconfig)
      << "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
      << "clusters: [{name: k, cluster: {server: '" << server_->url() << "'}}]\n"
      << "users: [{name: u, user: {token: t}}]\n"
      << "contexts: [{name: c, context: {cluster: k, user: u, namespace: other}}]\n";
  const std::string config = dir.path() + "/job.yaml";
  std::ofstream(config) << "trainingInput:\n  scaleTier: BASIC\n";
  auto run = [&](const std::string& args, const std::string& out_name = "out") {
    const std::string out = dir.path() + "/" + out_name;
    std::string command =
        absl::StrCat("KUBECONFIG=", kubeconfig, " KUBETRAIN_BACKEND= KUBETRAIN_HOME=", dir.path(),
                     " ", KUBETRAIN_CLI, " ", args, " >", out, " 2>&1");
    int status = std::system(command.c_str());
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str());
  };

  std::pair<int, std::string> submitted;
  std::thread submit([&] {
    submitted = run(absl::StrCat("jobs submit training streamed --config ", config, " -n ", kNs,
                                 " --stream-logs"),
                    "submit.out");
  });
  // A failed assertion below returns early: the job is ended then, so the
  // streaming command returns and the test fails instead of waiting on it.
  absl::Cleanup end_submit = [&] {
    if (!submit.joinable()) return;
    if (server_->Get("trainingjobs", kNs, "streamed").ok()) SetState("streamed", "CANCELLED");
    submit.join();
  };
  // What the command has printed so far: it streams, line by line.
  auto so_far = [&] {
    std::ifstream in(dir.path() + "/submit.out");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  ASSERT_TRUE(
      server_->WaitUntil([&] { return server_->Get("trainingjobs", kNs, "streamed").ok(); }));
  CreatePod("streamed", {"", api::Role::kMaster, 0});
  Start("streamed-master-0");
  SetState("streamed", "RUNNING");
  Log("streamed-master-0", "Train [master/0], step 1: loss: 2.3");
  ASSERT_TRUE(test_support::WaitUntil([&] {
    return absl::StrContains(so_far(), "[kubetrain] job [streamed] is RUNNING") &&
           absl::StrContains(so_far(), "step 1: loss: 2.3");
  })) << so_far();
  Log("streamed-master-0", "Final metrics after 1 steps, loss: 2.3");
  Stop("streamed-master-0");
  SetPhase("streamed-master-0", "Succeeded");
  SetState("streamed", "SUCCEEDED");
  std::move(end_submit).Cancel();
  submit.join();
  EXPECT_EQ(submitted.first, 0) << submitted.second;
  EXPECT_THAT(submitted.second, HasSubstr("Job [streamed] submitted successfully."));
  EXPECT_THAT(submitted.second, HasSubstr("[kubetrain] job [streamed] is RUNNING"));
  EXPECT_THAT(
      Messages(submitted.second, "master-replica-0"),
      ElementsAre("Train [master/0], step 1: loss: 2.3", "Final metrics after 1 steps, loss: 2.3"));
  EXPECT_THAT(submitted.second, HasSubstr("Job [streamed] ended SUCCEEDED"));

  auto [code, out] = run(absl::StrCat("jobs stream-logs streamed -n ", kNs,
                                      " --polling-interval 1 --task-name master-replica-0"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(
      Messages(out, "master-replica-0"),
      ElementsAre("Train [master/0], step 1: loss: 2.3", "Final metrics after 1 steps, loss: 2.3"));
  auto [missing_code, missing] = run("jobs stream-logs streamed");  // the context's namespace
  EXPECT_EQ(missing_code, 1);
  EXPECT_THAT(missing, HasSubstr("job [streamed] not found in namespace other"));
}

}  // namespace
}  // namespace kubetrain::cli
