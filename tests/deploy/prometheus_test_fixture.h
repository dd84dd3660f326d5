#pragma once

#include <string>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "tests/deploy/prometheus_server.h"

namespace kubetrain::deploy_testing {

// For tests that run a PrometheusServer: skipped where Prometheus is not
// installed; otherwise each test gets a fresh folder, dir_, for Prometheus'
// config, storage and log (and its own files), removed after the test.
class PrometheusFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PrometheusServer::Installed()) {
      GTEST_SKIP() << PrometheusServer::kBinary << " is not installed";
    }
  }

  test_support::TempDir tmp_{"kubetrain-prom"};
  const std::string dir_ = tmp_.path();
};

}  // namespace kubetrain::deploy_testing
