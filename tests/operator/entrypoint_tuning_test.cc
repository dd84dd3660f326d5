// A tuning study whose master runs its image's own entrypoint, on
// Kubernetes: the trainer reports through the cloudml-hypertune file only,
// and every trial gets its objective through the metrics sidecar.
//
// The controller (in this process) runs against the fake API server, with
// the real Metrics service on a loopback port; the stand-in kubelet runs each
// pod as rendered: the "image" is a shell script that writes the hypertune
// file, the sidecar is the real `kubetrain-runtime collect`, both see the
// pod's emptyDir as one host folder, and the sidecar is stopped with SIGTERM
// once the trainer has ended, before the pod's phase says so.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "operator/kube/controller.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/study_store.h"
#include "operator/kube/test_objects.h"
#include "operator/kube/trial_metrics.h"
#include "operator/local/controller.h"
#include "operator/metrics/metrics_service.h"
#include "operator/metrics/metrics_test_server.h"
#include "operator/tuner/tuner.h"
#include "tests/fake_apiserver/fake_apiserver.h"
#include "tests/operator/stand_in_kubelet.h"

namespace kubetrain::testing {
namespace {

using nlohmann::json;

constexpr char kImage[] = "registry.example.com/hypertune-trainer:1";

// The image's entrypoint: reads its hyperparameter --x=N and reports
// accuracy N * step at steps 1, 2, 3 with cloudml-hypertune's file format
// (the whole file rewritten on each report).
constexpr char kTrainer[] = R"(x=0
for a in "$@"; do case "$a" in --x=*) x="${a#--x=}";; esac; done
lines=""
for step in 1 2 3; do
  lines="${lines}{\"accuracy\": \"$((x * step))\", \"global_step\": \"${step}\", \"timestamp\": 1.0}
"
  printf '%s' "$lines" > "$CLOUD_ML_HP_METRIC_FILE"
  sleep 0.2
done
)";

class EntrypointTuningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_apiserver::FakeApiServer::Options server_options;
    server_options.bookmark_interval = absl::Milliseconds(200);
    server_ = *fake_apiserver::FakeApiServer::Start(server_options);
    client_ = kube::testing::FakeServerClient(server_->url());
    absl::StatusOr<int> port = local::PickFreePort();
    ASSERT_TRUE(port.ok()) << port.status();
    kube::ControllerOptions options;
    options.ns = "ns1";
    options.workers = 2;
    options.reconcile.metrics_address = absl::StrCat("127.0.0.1:", *port);
    options.reconcile.trial_token = [this](const std::string& uid, const std::string& trial) {
      return issuer_.Token(uid, trial);
    };
    options.reconcile.tuner_factory = tuner::Tuner::Create;
    controller_ = std::make_unique<kube::Controller>(client_.get(), options, &studies_);
    studies_.SetListener([this](const std::string& uid) { controller_->EnqueueByUid(uid); });
    trial_metrics_ = std::make_unique<kube::ClusterTrialMetrics>(controller_.get(), &studies_);
    trial_metrics_->SetLeading(true);
    service_ =
        std::make_unique<metrics::MetricsServiceImpl>(trial_metrics_.get(), trial_metrics_.get());
    grpc_server_ = metrics::LoopbackServer::Start(service_.get(), *port);
    ASSERT_NE(grpc_server_, nullptr) << "port " << *port;
    ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  }
  void TearDown() override {
    kubelet_.reset();
    grpc_server_.reset();
    if (controller_ != nullptr) controller_->Stop();
  }

  test_support::TempDir tmp_{"kubetrain-entrypoint"};
  std::unique_ptr<fake_apiserver::FakeApiServer> server_;
  std::unique_ptr<kube::RestClusterClient> client_;
  kube::TrialTokenIssuer issuer_;
  kube::InMemoryStudyStore studies_;
  std::unique_ptr<kube::Controller> controller_;
  std::unique_ptr<kube::ClusterTrialMetrics> trial_metrics_;
  std::unique_ptr<metrics::MetricsServiceImpl> service_;
  std::unique_ptr<metrics::LoopbackServer> grpc_server_;
  std::unique_ptr<StandInKubelet> kubelet_;
};

TEST_F(EntrypointTuningTest, EveryTrialGetsItsObjectiveThroughTheHypertuneFile) {
  const std::string script = tmp_.path() + "/trainer.sh";
  std::ofstream(script) << kTrainer;
  kubelet_ = std::make_unique<StandInKubelet>(
      std::map<std::string, std::string>{},
      std::map<std::string, std::vector<std::string>>{{kImage, {"/bin/sh", script}}});
  kubelet_->RunPods(server_.get(), "ns1", tmp_.path());

  json job = kube::testing::TuningJobObject("entry", 3, 2);
  job["spec"]["trainingInput"]["masterConfig"] = {{"imageUri", kImage}};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server_->WaitUntil(
      [&] {
        auto j = server_->Get("trainingjobs", "ns1", "entry");
        const std::string state = j.ok() ? j->value("/status/state"_json_pointer, "") : "";
        return state == "SUCCEEDED" || state == "FAILED";
      },
      absl::Seconds(120)));
  const json status = (*server_->Get("trainingjobs", "ns1", "entry"))["status"];
  ASSERT_EQ(status["state"], "SUCCEEDED") << status.dump();
  const json& trials = status["trainingOutput"]["trials"];
  ASSERT_EQ(trials.size(), 3u) << status.dump();
  for (const json& trial : trials) {
    int x = 0;
    ASSERT_TRUE(absl::SimpleAtoi(trial["hyperparameters"]["x"].get<std::string>(), &x))
        << trial.dump();
    // The trainer's last report, at step 3, of its own hyperparameter.
    EXPECT_EQ(trial["state"], "SUCCEEDED") << trial.dump();
    EXPECT_EQ(trial.value("/finalMetric/objectiveValue"_json_pointer, -1.0), 3.0 * x)
        << trial.dump();
    EXPECT_EQ(trial.value("/finalMetric/trainingStep"_json_pointer, int64_t{-1}), 3)
        << trial.dump();
    EXPECT_EQ(trial["allMetrics"].size(), 3u) << trial.dump();
  }
}

// The image's entrypoint for a pausing study: reports accuracy
// 10 * (10 - trial id) + step at steps 1..6 (the earlier trial the better),
// keeping its progress in folder $1, which outlives its pods, as a trainer
// keeps its checkpoints in the job's output folder.
constexpr char kResumingTrainer[] = R"(x=$((10 * (10 - CLOUD_ML_TRIAL_ID)))
progress="$1/progress-$CLOUD_ML_TRIAL_ID"
step=0
if [ -f "$progress" ]; then step=$(cat "$progress"); fi
lines=""
while [ "$step" -lt 6 ]; do
  step=$((step + 1))
  echo "$step" > "$progress"
  lines="${lines}{\"accuracy\": \"$((x + step))\", \"global_step\": \"${step}\", \"timestamp\": 1.0}
"
  printf '%s' "$lines" > "$CLOUD_ML_HP_METRIC_FILE"
  sleep 0.6
done
)";

// earlyStopping.pauseAtRungs on a cluster: trials are paused (their pods
// deleted), resumed (their pods created again) and end stopped early at a
// rung or trained to the end, with status, events and the CRD's schema as a
// real API server keeps them. Trial 1 is the best: whichever of trials 1 and
// 2 reaches rung 0 first is paused there alone, and is resumed later (2 once
// trial 4 makes it one of the best 2 of 4), so a resumption is certain.
TEST_F(EntrypointTuningTest, APausingStudyPausesAndResumesTrialsThroughTheApiServer) {
  const std::string script = tmp_.path() + "/trainer.sh";
  std::ofstream(script) << kResumingTrainer;
  kubelet_ = std::make_unique<StandInKubelet>(
      std::map<std::string, std::string>{},
      std::map<std::string, std::vector<std::string>>{{kImage, {"/bin/sh", script, tmp_.path()}}});
  kubelet_->RunPods(server_.get(), "ns1", tmp_.path());

  json job = kube::testing::TuningJobObject("pausing", 4, 2);
  job["spec"]["trainingInput"]["masterConfig"] = {{"imageUri", kImage}};
  job["spec"]["trainingInput"]["hyperparameters"]["earlyStopping"] = {
      {"algorithm", "SUCCESSIVE_HALVING"}, {"reductionFactor", 2}, {"pauseAtRungs", true}};
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  bool seen_paused = false;
  ASSERT_TRUE(server_->WaitUntil(
      [&] {
        auto j = server_->Get("trainingjobs", "ns1", "pausing");
        if (!j.ok()) return false;
        for (const json& t :
             j->value("/status/trainingOutput/trials"_json_pointer, json::array())) {
          seen_paused = seen_paused || t.value("paused", false);
        }
        const std::string state = j->value("/status/state"_json_pointer, "");
        return state == "SUCCEEDED" || state == "FAILED";
      },
      absl::Seconds(120)));
  EXPECT_TRUE(seen_paused);  // `paused` is in the CRD's schema: not pruned
  const json status = (*server_->Get("trainingjobs", "ns1", "pausing"))["status"];
  ASSERT_EQ(status["state"], "SUCCEEDED") << status.dump();
  const json& trials = status["trainingOutput"]["trials"];
  ASSERT_EQ(trials.size(), 4u) << status.dump();
  int stopped = 0, to_the_end = 0;
  for (const json& trial : trials) {
    SCOPED_TRACE(trial.dump());
    EXPECT_EQ(trial["state"], "SUCCEEDED");
    EXPECT_FALSE(trial.value("paused", false));
    ASSERT_FALSE(trial.value("rungMetrics", json::array()).empty());
    // Each step reported once, in order, across the trial's pods.
    int64_t previous = 0;
    for (const json& m : trial["allMetrics"]) {
      const int64_t step = m["trainingStep"].get<int64_t>();
      EXPECT_GT(step, previous);
      previous = step;
    }
    // Reports a trainer makes between its pause and its pod's deletion may
    // be lost here, where the fake API server deletes a pod at once and the
    // stand-in kubelet kills it (a real pod terminates over its grace
    // period, still reporting): steps may be missing, never repeated.
    (trial.value("isTrialStoppedEarly", false) ? stopped : to_the_end) += 1;
  }
  EXPECT_GE(stopped, 2);
  EXPECT_GE(to_the_end, 1);
  std::map<std::string, int> reasons;
  for (const json& e : server_->List("events", "ns1")) ++reasons[e.value("reason", "")];
  EXPECT_GE(reasons["TrialPaused"], 1);
  EXPECT_GE(reasons["TrialResumed"], 1);
}

}  // namespace
}  // namespace kubetrain::testing
