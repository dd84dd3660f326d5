#pragma once

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/kube/controller.h"
#include "operator/kube/study_store.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::testing {

// The operator's controller, in this process, watching namespace "ns1" of a
// fake API server: what the tests that run its pods (stand_in_kubelet.h)
// start from. Recreations back off 200 ms, not 10 s.
class ControllerOnFakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_apiserver::FakeApiServer::Options options;
    options.bookmark_interval = absl::Milliseconds(200);
    auto server = fake_apiserver::FakeApiServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = kube::testing::FakeServerClient(server_->url());
    kube::ControllerOptions controller_options;
    controller_options.ns = "ns1";
    controller_options.workers = 2;
    controller_options.reconcile.recreate_backoff_base = absl::Milliseconds(200);
    controller_ = std::make_unique<kube::Controller>(client_.get(), controller_options, &studies_);
    ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  }
  void TearDown() override {
    if (controller_ != nullptr) controller_->Stop();
  }

  // The pod as stored now; null when there is none.
  nlohmann::json Pod(const std::string& name) {
    auto pod = server_->Get("pods", "ns1", name);
    return pod.ok() ? *pod : nlohmann::json();
  }

  std::unique_ptr<fake_apiserver::FakeApiServer> server_;
  std::unique_ptr<kube::RestClusterClient> client_;
  kube::InMemoryStudyStore studies_;
  std::unique_ptr<kube::Controller> controller_;
};

}  // namespace kubetrain::testing
