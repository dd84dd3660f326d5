#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

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
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kubetrain-prom-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << pattern;
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string dir_;
};

}  // namespace kubetrain::deploy_testing
