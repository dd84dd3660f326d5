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

}  // namespace
}  // namespace kubetrain::testing
