#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

namespace kubetrain::deploy_testing {

// The repository root (set by CMake).
std::string SourcePath(const std::string& relative);
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Every document of a multi-document YAML stream, empty ones dropped.
absl::StatusOr<std::vector<YAML::Node>> ParseDocuments(const std::string& text);

// What is wrong with the operator Deployment, by the rules of issue 8: the
// replica count, leader election, /healthz and /readyz probes on the served
// port, resource requests, a non-root, read-only, capability-less,
// RuntimeDefault-seccomp container, the operator's own service account (and
// its token) and nothing host-level. Empty: nothing.
std::vector<std::string> OperatorDeploymentProblems(const YAML::Node& deployment,
                                                    int expected_replicas);

// The value of the operator container's --default-image=IMAGE argument; ""
// when it has none.
std::string DefaultImageArg(const YAML::Node& deployment);

// "kubetrain/kubetrain-runtime:<project version>": the image
// scripts/build-images.sh makes and the operator's built-in default.
std::string VersionedRuntimeImage();
// project(VERSION) of CMakeLists.txt.
std::string ProjectVersion();

// The `rules` of the first object of `kind` named `name` ("" any name) in
// `documents`, re-emitted as YAML; NotFound when there is none.
absl::StatusOr<std::string> RulesOf(const std::vector<YAML::Node>& documents,
                                    const std::string& kind, const std::string& name);

// A command's exit status (-1: did not run or was killed) and its output
// (stdout and stderr together).
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& command_line);

// Whether `program` is on PATH.
bool OnPath(const std::string& program);

}  // namespace kubetrain::deploy_testing
