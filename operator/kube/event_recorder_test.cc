#include "operator/kube/event_recorder.h"

#include "gtest/gtest.h"
#include "operator/kube/rest_client.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

TEST(EventRecorderTest, WritesEventsAboutTheObjectAndSurvivesFailures) {
  auto server = *fake_apiserver::FakeApiServer::Start();
  ClusterConfig config;
  config.server = server->url();
  auto client = *RestClusterClient::Create(config, RestClientOptions{.qps = 0});
  auto job = server->Create("trainingjobs", "ns1", {{"metadata", {{"name", "j1"}}}, {"spec", {}}});
  ASSERT_TRUE(job.ok());
  EventRecorder recorder(client.get(), "kubetrain-operator");
  recorder.Record(*job, EventRecorder::Type::kNormal, "SuccessfulCreate",
                  "Created pod j1-master-0");
  recorder.Record(*job, EventRecorder::Type::kWarning, "ReplicaFailed",
                  "worker-1 exited with code 1");
  server->FailNextRequests(1, 500);
  recorder.Record(*job, EventRecorder::Type::kNormal, "Dropped", "lost to a 500");
  EXPECT_EQ(recorder.recorded(), 2);

  auto events = server->List("events", "ns1");
  ASSERT_EQ(events.size(), 2u);
  std::set<std::string> reasons;
  for (const auto& e : events) {
    reasons.insert(e["reason"]);
    EXPECT_EQ(e["involvedObject"]["kind"], "TrainingJob");
    EXPECT_EQ(e["involvedObject"]["name"], "j1");
    EXPECT_EQ(e["involvedObject"]["uid"], (*job)["metadata"]["uid"]);
    EXPECT_EQ(e["source"]["component"], "kubetrain-operator");
  }
  EXPECT_EQ(reasons, (std::set<std::string>{"SuccessfulCreate", "ReplicaFailed"}));
}

}  // namespace
}  // namespace kubetrain::kube
