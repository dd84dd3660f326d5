#pragma once

// Kubernetes objects the controller's tests and the operator's integration
// tests create on the fake API server, and a client to talk to it.
// Header-only, for tests.

#include <memory>
#include <string>

#include "nlohmann/json.hpp"
#include "operator/kube/rest_client.h"

namespace kubetrain::kube::testing {

// A TrainingJob named `name` with `spec`, as a user applies one.
inline nlohmann::json TrainingJobObject(const std::string& name, nlohmann::json spec) {
  return {{"apiVersion", "kubetrain.io/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec", std::move(spec)}};
}

// A BASIC tuning job maximising "accuracy" over one INTEGER parameter x in
// [1, 100]; `resume` sets resumePreviousJobId when not empty.
inline nlohmann::json TuningJobObject(const std::string& name, int max_trials,
                                      int max_parallel_trials, const std::string& resume = "") {
  nlohmann::json hyperparameters = {{"goal", "MAXIMIZE"},
                                    {"maxTrials", max_trials},
                                    {"maxParallelTrials", max_parallel_trials},
                                    {"hyperparameterMetricTag", "accuracy"},
                                    {"params",
                                     {{{"parameterName", "x"},
                                       {"type", "INTEGER"},
                                       {"minValue", 1},
                                       {"maxValue", 100},
                                       {"scaleType", "UNIT_LINEAR_SCALE"}}}}};
  if (!resume.empty()) hyperparameters["resumePreviousJobId"] = resume;
  return TrainingJobObject(
      name, {{"trainingInput", {{"scaleTier", "BASIC"}, {"hyperparameters", hyperparameters}}},
             {"runPolicy", {{"restartPolicy", "Never"}}}});
}

// A pod status patch: `phase` with the container "kubetrain" terminated
// with `exit_code`.
inline nlohmann::json TerminatedPodStatus(const std::string& phase, int exit_code) {
  return {{"status",
           {{"phase", phase},
            {"containerStatuses",
             {{{"name", "kubetrain"},
               {"restartCount", 0},
               {"state", {{"terminated", {{"exitCode", exit_code}, {"message", "exit"}}}}}}}}}}};
}

// A client of the fake API server at `url`, without a rate limit: tests
// send their requests back to back.
inline std::unique_ptr<RestClusterClient> FakeServerClient(const std::string& url) {
  ClusterConfig config;
  config.server = url;
  return *RestClusterClient::Create(config, RestClientOptions{.qps = 0});
}

}  // namespace kubetrain::kube::testing
