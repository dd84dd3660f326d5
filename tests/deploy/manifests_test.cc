// The manifests and images as files: the operator Deployment's fields, the
// chart's CRD, the Dockerfiles. (Rendering with kubectl/helm: tools_test.cc.)
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/deploy/manifest_checks.h"

namespace kubetrain::deploy_testing {
namespace {

TEST(ManifestsTest, OperatorDeploymentHasTheRequiredFields) {
  auto text = ReadFile(SourcePath("deploy/operator/deployment.yaml"));
  ASSERT_TRUE(text.ok()) << text.status();
  auto docs = ParseDocuments(*text);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 1u);
  std::vector<std::string> problems = OperatorDeploymentProblems((*docs)[0], 2);
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
}

TEST(ManifestsTest, DeploymentCheckCatchesAWeakenedDeployment) {
  auto text = ReadFile(SourcePath("deploy/operator/deployment.yaml"));
  ASSERT_TRUE(text.ok()) << text.status();
  auto docs = ParseDocuments(*text);
  ASSERT_TRUE(docs.ok() && !docs->empty());
  YAML::Node weakened = YAML::Clone((*docs)[0]);
  weakened["spec"]["template"]["spec"]["containers"][0]["securityContext"]
          ["readOnlyRootFilesystem"] = false;
  weakened["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] =
      "/metrics";
  EXPECT_EQ(OperatorDeploymentProblems(weakened, 2).size(), 2u);
  EXPECT_EQ(OperatorDeploymentProblems((*docs)[0], 3).size(), 1u);  // replicas
}

TEST(ManifestsTest, ServiceAccountDoesNotAutomountItsToken) {
  auto text = ReadFile(SourcePath("deploy/rbac/base/service_account.yaml"));
  ASSERT_TRUE(text.ok()) << text.status();
  auto docs = ParseDocuments(*text);
  ASSERT_TRUE(docs.ok() && docs->size() == 1);
  EXPECT_EQ((*docs)[0]["automountServiceAccountToken"].as<std::string>(), "false");
}

TEST(ManifestsTest, HelmChartCrdIsTheGeneratedOne) {
  auto generated = ReadFile(SourcePath("deploy/crds/kubetrain.io_trainingjobs.yaml"));
  auto chart = ReadFile(SourcePath("helm/kubetrain/crds/kubetrain.io_trainingjobs.yaml"));
  ASSERT_TRUE(generated.ok()) << generated.status();
  ASSERT_TRUE(chart.ok()) << chart.status();
  EXPECT_EQ(*chart, *generated)
      << "helm/kubetrain/crds/ is stale: cp deploy/crds/kubetrain.io_trainingjobs.yaml "
         "helm/kubetrain/crds/";
}

// ---- Dockerfiles (hadolint is not packaged in Debian 12). ----

struct Instruction {
  std::string keyword;  // upper case
  std::string arguments;
};
struct Stage {
  std::string base, name;
  std::vector<Instruction> instructions;
};

// Instructions with their continuation lines joined, comments dropped,
// grouped by FROM.
std::vector<Stage> ParseDockerfile(const std::string& text) {
  std::vector<Stage> stages;
  std::string logical;
  auto flush = [&] {
    std::string line(absl::StripAsciiWhitespace(logical));
    logical.clear();
    if (line.empty()) return;
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    Instruction instruction{
        absl::AsciiStrToUpper(parts[0]),
        parts.size() > 1 ? std::string(absl::StripAsciiWhitespace(parts[1])) : ""};
    if (instruction.keyword == "FROM") {
      std::vector<std::string> words =
          absl::StrSplit(instruction.arguments, ' ', absl::SkipWhitespace());
      Stage stage;
      for (size_t i = 0; i < words.size(); ++i) {
        if (absl::StartsWith(words[i], "--")) continue;
        if (stage.base.empty()) {
          stage.base = words[i];
        } else if (absl::AsciiStrToUpper(words[i]) == "AS" && i + 1 < words.size()) {
          stage.name = words[i + 1];
        }
      }
      stages.push_back(stage);
    } else if (!stages.empty()) {
      stages.back().instructions.push_back(instruction);
    }
  };
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (logical.empty() && absl::StartsWith(line, "#")) continue;
    if (absl::EndsWith(line, "\\")) {
      absl::StrAppend(&logical, line.substr(0, line.size() - 1), " ");
      continue;
    }
    if (!absl::StartsWith(line, "#")) absl::StrAppend(&logical, line);
    flush();
  }
  flush();
  return stages;
}

// The last value of `keyword` in `stage`, or "".
std::string Last(const Stage& stage, const std::string& keyword) {
  std::string value;
  for (const Instruction& i : stage.instructions) {
    if (i.keyword == keyword) value = i.arguments;
  }
  return value;
}

// Problems common to both images: several named stages, COPY --from names an
// earlier stage, the final stage runs as a non-root user and starts the
// binary in exec form.
std::vector<std::string> ImageProblems(const std::vector<Stage>& stages,
                                       const std::string& binary) {
  std::vector<std::string> problems;
  if (stages.size() < 2) problems.push_back("not multi-stage");
  std::set<std::string> earlier;
  for (const Stage& stage : stages) {
    for (const Instruction& i : stage.instructions) {
      if (i.keyword != "COPY" || !absl::StartsWith(i.arguments, "--from=")) continue;
      std::string from = std::string(absl::StripPrefix(i.arguments, "--from="));
      from = from.substr(0, from.find(' '));
      if (earlier.count(from) == 0) problems.push_back("COPY --from=" + from + ": no such stage");
    }
    if (stage.name.empty()) problems.push_back("stage FROM " + stage.base + " has no name");
    earlier.insert(stage.name);
  }
  if (stages.empty()) return problems;
  const Stage& final = stages.back();
  const std::string user = Last(final, "USER");
  const std::string uid = user.substr(0, user.find(':'));
  if (user.empty() || uid == "root" || uid == "0") {
    problems.push_back("final stage runs as root (USER '" + user + "')");
  }
  const std::string entrypoint = Last(final, "ENTRYPOINT");
  nlohmann::json exec = nlohmann::json::parse(entrypoint, nullptr, /*allow_exceptions=*/false);
  if (!exec.is_array() || exec.empty() || !exec[0].is_string()) {
    problems.push_back("ENTRYPOINT is not exec form: " + entrypoint);
  } else if (!absl::EndsWith(exec[0].get<std::string>(), "/" + binary)) {
    problems.push_back("ENTRYPOINT does not start " + binary);
  }
  return problems;
}

TEST(DockerfileTest, OperatorImageIsMultiStageNonRootWithoutShell) {
  auto text = ReadFile(SourcePath("deploy/docker/operator.Dockerfile"));
  ASSERT_TRUE(text.ok()) << text.status();
  std::vector<Stage> stages = ParseDockerfile(*text);
  std::vector<std::string> problems = ImageProblems(stages, "kubetrain-operator");
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  ASSERT_FALSE(stages.empty());
  EXPECT_TRUE(absl::StartsWith(stages.front().base, "debian:12")) << stages.front().base;
  // No shell at run time: a distroless final stage, and nothing in it that
  // would need one (RUN, shell-form CMD).
  const Stage& final = stages.back();
  EXPECT_TRUE(absl::StrContains(final.base, "distroless")) << final.base;
  for (const Instruction& i : final.instructions) {
    EXPECT_NE(i.keyword, "RUN") << i.arguments;
    if (i.keyword == "CMD") EXPECT_TRUE(absl::StartsWith(i.arguments, "[")) << i.arguments;
  }
}

TEST(DockerfileTest, RuntimeImageIsMultiStageAndNonRoot) {
  auto text = ReadFile(SourcePath("deploy/docker/runtime.Dockerfile"));
  ASSERT_TRUE(text.ok()) << text.status();
  std::vector<Stage> stages = ParseDockerfile(*text);
  std::vector<std::string> problems = ImageProblems(stages, "kubetrain-runtime");
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  // Debian 12 by default; the CUDA variant swaps the bases through build args.
  EXPECT_TRUE(absl::StrContains(*text, "ARG BUILD_BASE=debian:12"));
  EXPECT_TRUE(absl::StrContains(*text, "ARG RUN_BASE=debian:12-slim"));
}

TEST(DockerfileTest, ParserSeesRootAndShellForm) {
  std::vector<Stage> stages = ParseDockerfile(
      "FROM debian:12 AS build\nRUN make \\\n  all\nFROM debian:12-slim AS final\n"
      "COPY --from=nowhere /a /b\nENTRYPOINT /usr/bin/kubetrain-runtime\n");
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].instructions[0].arguments, "make  all");
  std::vector<std::string> problems = ImageProblems(stages, "kubetrain-runtime");
  // No USER (root), shell-form ENTRYPOINT, unknown COPY source.
  EXPECT_EQ(problems.size(), 3u) << absl::StrJoin(problems, "\n");
}

}  // namespace
}  // namespace kubetrain::deploy_testing
