// A replica recreated on Kubernetes resumes from the job's output claim.
//
// The operator's controller (in this process) runs against the fake API
// server; a stand-in for the kubelet runs each pod as the operator rendered
// it: the training container's command, args and environment, with the
// claim's volume backed by a host folder at the pod's mount path. So the real
// kubetrain-runtime trains as the master and as the evaluator, the master is
// killed in the middle (exit 137, retryable under the ExitCode policy), the
// pod the operator creates in its place restores the last checkpoint from
// the claim, and the evaluator, in a pod of its own, reads the master's
// checkpoints there.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/child_process.h"
#include "common/testing/runtime_output.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"
#include "operator/kube/controller.h"
#include "operator/kube/controller_test_fixture.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"
#include "tests/operator/stand_in_kubelet.h"

namespace kubetrain::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test_support::LatestCheckpointStep;
using test_support::ReadFile;

class SharedOutputResumeTest : public kube::testing::ControllerOnFakeServerTest {
 protected:
  // Recreations back off 200 ms, not 10 s.
  kube::ControllerOptions Options() const override {
    kube::ControllerOptions options = ControllerOnFakeServerTest::Options();
    options.reconcile.recreate_backoff_base = absl::Milliseconds(200);
    return options;
  }

  void SetPhase(const std::string& pod, const json& status) {
    ASSERT_TRUE(server_->MergePatch("pods", "ns1", pod, status, "status").ok()) << pod;
  }

  test_support::TempDir tmp_{"kubetrain-resume"};
  const std::string dir_ = tmp_.path();
};

TEST_F(SharedOutputResumeTest, RecreatedMasterResumesFromTheClaimAndTheEvaluatorReadsIt) {
  // Data baked into the "image": a host path, not on the claim.
  const std::string data = dir_ + "/train.csv";
  {
    std::ofstream out(data);
    for (int i = 0; i < 1024; ++i) {
      const int label = i % 2;
      out << (label ? 1.0 : -1.0) + 0.001 * (i % 97) << "," << 0.002 * (i % 89) << "," << label
          << "\n";
    }
  }
  const std::string claim_folder = dir_ + "/claim";  // what the claim "shared" holds
  fs::create_directories(claim_folder);
  const std::string outputs = claim_folder + "/resume";  // its subPath
  constexpr int64_t kMaxSteps = 2000;
  json job = {{"apiVersion", "kubetrain.io/v1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "resume"}}},
              {"spec",
               {{"trainingInput",
                 {{"scaleTier", "CUSTOM"},
                  {"masterType", "standard"},
                  {"evaluatorCount", 1},
                  {"jobDir", "/outputs"},
                  // Steps big enough that training takes seconds: time to kill it.
                  {"args",
                   {"--train_data_paths=" + data, absl::StrCat("--max_steps=", kMaxSteps),
                    "--save_checkpoints_steps=100", "--batch_size=256", "--hidden1=256",
                    "--hidden2=256", "--threads=1", "--seed=5", "--eval_every_secs=0"}}}},
                {"outputStorage", {{"claimName", "shared"}, {"subPath", "resume"}}},
                {"runPolicy", {{"restartPolicy", "ExitCode"}, {"backoffLimit", 2}}}}}};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server_->WaitUntil(
      [&] { return Pod("resume-master-0").is_object() && Pod("resume-evaluator-0").is_object(); }));
  StandInKubelet kubelet({{"shared", claim_folder}});
  // Each container's working folder is its own: nothing may land there.
  const std::string master_cwd = dir_ + "/master-cwd";
  const std::string evaluator_cwd = dir_ + "/evaluator-cwd";
  fs::create_directories(master_cwd);
  fs::create_directories(evaluator_cwd);

  const json first_pod = Pod("resume-master-0");
  const auto master = kubelet.Start(first_pod, dir_ + "/master-1.log", master_cwd);
  const auto evaluator =
      kubelet.Start(Pod("resume-evaluator-0"), dir_ + "/evaluator.log", evaluator_cwd);
  ASSERT_NE(master, nullptr);
  ASSERT_NE(evaluator, nullptr);
  SetPhase("resume-master-0", {{"status", {{"phase", "Running"}}}});
  SetPhase("resume-evaluator-0", {{"status", {{"phase", "Running"}}}});

  ASSERT_TRUE(test_support::WaitUntil([&] { return LatestCheckpointStep(outputs) >= 200; },
                                      absl::Seconds(300)))
      << ReadFile(dir_ + "/master-1.log");
  ASSERT_TRUE(master->running());
  master->Kill();
  ASSERT_EQ(master->Wait(absl::Now() + absl::Seconds(30)).value_or(-1), 137);
  // Nothing writes there now: the checkpoint the next master must restore.
  const int64_t last = LatestCheckpointStep(outputs);
  ASSERT_LT(last, kMaxSteps) << "training ended before it was killed";
  RecordProperty("resumed_from_step", static_cast<int>(last));
  // The kubelet reports the container's end.
  SetPhase("resume-master-0", kube::testing::TerminatedPodStatus("Failed", 137));

  // The operator replaces the pod: same name, a new object.
  ASSERT_TRUE(server_->WaitUntil(
      [&] {
        const json pod = Pod("resume-master-0");
        return pod.is_object() && pod["metadata"]["uid"] != first_pod["metadata"]["uid"];
      },
      absl::Seconds(60)));
  const json second_pod = Pod("resume-master-0");
  EXPECT_EQ(second_pod["spec"]["volumes"], first_pod["spec"]["volumes"]);
  EXPECT_EQ(second_pod["spec"]["containers"][0]["volumeMounts"],
            first_pod["spec"]["containers"][0]["volumeMounts"]);
  const auto restarted = kubelet.Start(second_pod, dir_ + "/master-2.log", master_cwd);
  ASSERT_NE(restarted, nullptr);
  SetPhase("resume-master-0", {{"status", {{"phase", "Running"}}}});
  ASSERT_EQ(restarted->Wait(absl::Now() + absl::Seconds(300)).value_or(-1), 0)
      << ReadFile(dir_ + "/master-2.log");
  const std::string restarted_log = ReadFile(dir_ + "/master-2.log");
  // (The runtime names the folder as its flags give it: the claim's.)
  EXPECT_TRUE(absl::StrContains(
      restarted_log, absl::StrCat("Restored checkpoint at step ", last, " from ", outputs)))
      << restarted_log;
  EXPECT_TRUE(
      absl::StrContains(restarted_log, absl::StrCat("Final metrics after ", kMaxSteps, " steps")))
      << restarted_log;
  EXPECT_EQ(LatestCheckpointStep(outputs), kMaxSteps);
  EXPECT_TRUE(fs::exists(outputs + "/export/model.pb"));
  SetPhase("resume-master-0", kube::testing::TerminatedPodStatus("Succeeded", 0));

  // The evaluator, in its own pod, saw the master's checkpoints through the
  // claim, up to the last one, and ended once the model was exported.
  ASSERT_EQ(evaluator->Wait(absl::Now() + absl::Seconds(120)).value_or(-1), 0)
      << ReadFile(dir_ + "/evaluator.log");
  const std::string evaluator_log = ReadFile(dir_ + "/evaluator.log");
  EXPECT_TRUE(absl::StrContains(evaluator_log, absl::StrCat("Evaluator, step ", kMaxSteps, ":")))
      << evaluator_log;

  ASSERT_TRUE(server_->WaitUntil([&] {
    auto job = server_->Get("trainingjobs", "ns1", "resume");
    return job.ok() && (*job)["status"].value("state", "") == "SUCCEEDED";
  })) << server_->Get("trainingjobs", "ns1", "resume")->dump();
  const json status = (*server_->Get("trainingjobs", "ns1", "resume"))["status"];
  EXPECT_EQ(status["restartCount"], 1);
  EXPECT_EQ(status["outputLocation"],
            json::parse(R"({"path": "/outputs", "claimName": "shared", "subPath": "resume"})"));
  // Outputs went only to the claim.
  EXPECT_TRUE(fs::is_empty(master_cwd));
  EXPECT_TRUE(fs::is_empty(evaluator_cwd));
}

// A claim outlives its jobs: a job that reuses the folder of an earlier one
// (the same claim and subPath, here even the same name after the first
// TrainingJob was deleted) never restores the earlier job's checkpoints. Its
// master finds them, names their owner, and trains from step 0 in a
// subfolder of its own (the runtime's checkpoint-ownership rule); the earlier
// job's files stay as they were.
TEST_F(SharedOutputResumeTest, ARerunOnAKeptClaimNeverRestoresTheEarlierJobsCheckpoints) {
  const std::string data = dir_ + "/train.csv";
  {
    std::ofstream out(data);
    for (int i = 0; i < 256; ++i) {
      const int label = i % 2;
      out << (label ? 1.0 : -1.0) + 0.001 * (i % 97) << "," << 0.002 * (i % 89) << "," << label
          << "\n";
    }
  }
  const std::string claim_folder = dir_ + "/claim";
  fs::create_directories(claim_folder);
  const std::string outputs = claim_folder + "/run";
  auto job_with_steps = [&](int max_steps) {
    return json{{"apiVersion", "kubetrain.io/v1"},
                {"kind", "TrainingJob"},
                {"metadata", {{"name", "rerun"}}},
                {"spec",
                 {{"trainingInput",
                   {{"scaleTier", "BASIC"},
                    {"jobDir", "/outputs"},
                    {"args",
                     {"--train_data_paths=" + data, absl::StrCat("--max_steps=", max_steps),
                      "--save_checkpoints_steps=100", "--batch_size=32", "--hidden1=8",
                      "--hidden2=4", "--threads=1", "--seed=5", "--eval_every_secs=0"}}}},
                  {"outputStorage", {{"claimName", "shared"}, {"subPath", "run"}}}}}};
  };
  StandInKubelet kubelet({{"shared", claim_folder}});
  const std::string cwd = dir_ + "/cwd";
  fs::create_directories(cwd);
  // Runs the job's master pod (the one owned by `job_uid`) to its end;
  // returns its log.
  auto run_master = [&](const std::string& job_uid, const std::string& log) {
    json pod;
    EXPECT_TRUE(server_->WaitUntil([&] {
      pod = Pod("rerun-master-0");
      return pod.is_object() && pod["metadata"]["ownerReferences"][0]["uid"] == job_uid;
    }));
    const auto master = kubelet.Start(pod, log, cwd);
    EXPECT_NE(master, nullptr);
    if (master == nullptr) return std::string();
    SetPhase("rerun-master-0", {{"status", {{"phase", "Running"}}}});
    EXPECT_EQ(master->Wait(absl::Now() + absl::Seconds(300)).value_or(-1), 0) << ReadFile(log);
    SetPhase("rerun-master-0", kube::testing::TerminatedPodStatus("Succeeded", 0));
    EXPECT_TRUE(server_->WaitUntil([&] {
      auto job = server_->Get("trainingjobs", "ns1", "rerun");
      return job.ok() && (*job)["status"].value("state", "") == "SUCCEEDED";
    }));
    return ReadFile(log);
  };

  auto first = server_->Create("trainingjobs", "ns1", job_with_steps(200));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string first_uid = (*first)["metadata"]["uid"];
  const std::string first_log = run_master(first_uid, dir_ + "/first.log");
  EXPECT_TRUE(absl::StrContains(first_log, "Final metrics after 200 steps")) << first_log;
  ASSERT_EQ(LatestCheckpointStep(outputs), 200);
  const std::string first_index = ReadFile(outputs + "/checkpoint");

  // The TrainingJob goes (its pods with it); the claim, the user's, stays.
  ASSERT_TRUE(server_->Delete("trainingjobs", "ns1", "rerun").ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return !Pod("rerun-master-0").is_object(); }));
  auto second = server_->Create("trainingjobs", "ns1", job_with_steps(300));
  ASSERT_TRUE(second.ok()) << second.status();
  const std::string second_uid = (*second)["metadata"]["uid"];
  ASSERT_NE(second_uid, first_uid);
  const std::string second_log = run_master(second_uid, dir_ + "/second.log");

  // "rerun-" and the first 8 hex digits of its uid: the second job's own folder.
  const std::string own = outputs + "/rerun-" + second_uid.substr(0, 8);
  EXPECT_FALSE(absl::StrContains(second_log, "Restored checkpoint")) << second_log;
  EXPECT_TRUE(absl::StrContains(second_log,
                                absl::StrCat("Output folder ", outputs, " is not this job's: ")))
      << second_log;
  EXPECT_TRUE(absl::StrContains(second_log, absl::StrCat("there is job 'rerun' (uid ", first_uid)))
      << second_log;
  EXPECT_TRUE(absl::StrContains(second_log, "Final metrics after 300 steps")) << second_log;
  EXPECT_EQ(LatestCheckpointStep(own), 300);
  EXPECT_TRUE(fs::exists(own + "/export/model.pb"));
  // The first job's outputs are as it left them.
  EXPECT_EQ(ReadFile(outputs + "/checkpoint"), first_index);
  EXPECT_TRUE(fs::is_empty(cwd));
}

}  // namespace
}  // namespace kubetrain::testing
