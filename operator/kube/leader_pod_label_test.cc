#include "operator/kube/leader_pod_label.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;
using ::testing::HasSubstr;

class LeaderPodLabelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = *FakeApiServer::Start({});
    client_ = testing::FakeServerClient(server_->url());
    for (const char* name : {"op-a", "op-b"}) {
      json pod = {
          {"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name}, {"labels", {{"app.kubernetes.io/name", "kubetrain-operator"}}}}},
          {"spec", {{"containers", {{{"name", "operator"}, {"image", "op"}}}}}}};
      ASSERT_TRUE(server_->Create("pods", "sys", pod).ok());
    }
  }
  // The label's value on `pod`; "" when absent.
  std::string Label(const std::string& pod) {
    auto object = server_->Get("pods", "sys", pod);
    if (!object.ok()) return "<missing>";
    return (*object)["metadata"]["labels"].value(kLabelMetricsLeader, "");
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
};

TEST_F(LeaderPodLabelTest, TheLastClaimantIsTheOnlyLabelledPod) {
  LeaderPodLabel a(client_.get(), "sys", "op-a"), b(client_.get(), "sys", "op-b");
  ASSERT_TRUE(a.Claim().ok());
  EXPECT_EQ(Label("op-a"), "true");
  EXPECT_EQ(Label("op-b"), "");
  // a died holding the label; b takes over and clears it.
  ASSERT_TRUE(b.Claim().ok());
  EXPECT_EQ(Label("op-a"), "");
  EXPECT_EQ(Label("op-b"), "true");
  // Other labels are left alone.
  auto pod = server_->Get("pods", "sys", "op-a");
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ((*pod)["metadata"]["labels"].value("app.kubernetes.io/name", ""), "kubetrain-operator");
  ASSERT_TRUE(b.Release().ok());
  EXPECT_EQ(Label("op-b"), "");
  // Releasing an unlabelled pod is fine.
  EXPECT_TRUE(a.Release().ok());
}

TEST_F(LeaderPodLabelTest, AMissingPodIsAnErrorNamingIt) {
  LeaderPodLabel wrong(client_.get(), "sys", "op-x");
  absl::Status s = wrong.Claim();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("sys/op-x"));
  EXPECT_EQ(Label("op-a"), "");
}

}  // namespace
}  // namespace kubetrain::kube
