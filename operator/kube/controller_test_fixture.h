#pragma once

// The real controller watching namespace ns1 of a fake API server, for the
// controller's end-to-end tests. Header-only, for tests.

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "operator/kube/controller.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube::testing {

class ControllerOnFakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_apiserver::FakeApiServer::Options server_options;
    server_options.bookmark_interval = absl::Milliseconds(200);
    server_ = *fake_apiserver::FakeApiServer::Start(server_options);
    client_ = FakeServerClient(server_->url());
    controller_ = std::make_unique<Controller>(client_.get(), Options(), &studies_);
    ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  }
  void TearDown() override {
    if (controller_ != nullptr) controller_->Stop();
  }

  // The controller's options: namespace ns1, 2 workers.
  virtual ControllerOptions Options() const {
    ControllerOptions options;
    options.ns = "ns1";
    options.workers = 2;
    return options;
  }

  // The pod as stored now; null when there is none.
  nlohmann::json Pod(const std::string& name) const {
    auto pod = server_->Get("pods", "ns1", name);
    return pod.ok() ? *pod : nlohmann::json();
  }

  std::unique_ptr<fake_apiserver::FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
  InMemoryStudyStore studies_;
  std::unique_ptr<Controller> controller_;
};

}  // namespace kubetrain::kube::testing
