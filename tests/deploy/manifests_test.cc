// The manifests and images as files: the operator Deployment's fields, the
// versions deploy/ and the chart name, the chart's CRD, deploy/docker/Dockerfile.
// (Rendering with kubectl/helm: tools_test.cc; building and running the
// images: tests/images.)
#include <map>
#include <set>
#include <string>
#include <utility>
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

// deploy/, the chart and the operator name one version: the images
// scripts/build-images.sh makes from this tree.
TEST(ManifestsTest, DeployAndChartNameTheVersionedImages) {
  auto text = ReadFile(SourcePath("deploy/operator/deployment.yaml"));
  ASSERT_TRUE(text.ok()) << text.status();
  auto docs = ParseDocuments(*text);
  ASSERT_TRUE(docs.ok() && docs->size() == 1);
  EXPECT_EQ(DefaultImageArg((*docs)[0]), VersionedRuntimeImage());
  const YAML::Node container = (*docs)[0]["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["image"].as<std::string>(),
            "kubetrain/kubetrain-operator:" + ProjectVersion());
  EXPECT_EQ(container["imagePullPolicy"].as<std::string>(), "IfNotPresent");

  auto kustomization = ReadFile(SourcePath("deploy/kustomization.yaml"));
  ASSERT_TRUE(kustomization.ok()) << kustomization.status();
  auto k = ParseDocuments(*kustomization);
  ASSERT_TRUE(k.ok() && k->size() == 1);
  ASSERT_TRUE((*k)[0]["images"].IsSequence());
  for (const auto& image : (*k)[0]["images"]) {
    EXPECT_EQ(image["newTag"].as<std::string>(), ProjectVersion())
        << image["name"].as<std::string>();
  }

  auto chart = ReadFile(SourcePath("helm/kubetrain/Chart.yaml"));
  ASSERT_TRUE(chart.ok()) << chart.status();
  auto c = ParseDocuments(*chart);
  ASSERT_TRUE(c.ok() && c->size() == 1);
  EXPECT_EQ((*c)[0]["appVersion"].as<std::string>(), ProjectVersion());
  EXPECT_EQ((*c)[0]["version"].as<std::string>(), ProjectVersion());
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

// The stage named `name`, or nullptr.
const Stage* StageNamed(const std::vector<Stage>& stages, const std::string& name) {
  for (const Stage& stage : stages) {
    if (stage.name == name) return &stage;
  }
  return nullptr;
}

// Problems common to every image: named stages, COPY --from names an earlier
// stage, and the image's stage `target` runs as a non-root user and starts
// `entry` (its ENTRYPOINT, exec form, begins with it).
std::vector<std::string> ImageProblems(const std::vector<Stage>& stages, const std::string& target,
                                       const std::vector<std::string>& entry) {
  std::vector<std::string> problems;
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
  const Stage* final = StageNamed(stages, target);
  if (final == nullptr) {
    problems.push_back("no stage " + target);
    return problems;
  }
  // USER is inherited from the stage it is FROM.
  std::string user = Last(*final, "USER");
  for (const Stage* s = final; user.empty() && s != nullptr; s = StageNamed(stages, s->base)) {
    user = Last(*s, "USER");
  }
  const std::string uid = user.substr(0, user.find(':'));
  if (user.empty() || uid == "root" || uid == "0") {
    problems.push_back(target + " runs as root (USER '" + user + "')");
  }
  const std::string entrypoint = Last(*final, "ENTRYPOINT");
  nlohmann::json exec = nlohmann::json::parse(entrypoint, nullptr, /*allow_exceptions=*/false);
  if (!exec.is_array() || exec.empty() || !exec[0].is_string()) {
    problems.push_back(target + ": ENTRYPOINT is not exec form: " + entrypoint);
    return problems;
  }
  for (size_t i = 0; i < entry.size(); ++i) {
    const bool same = i < exec.size() && exec[i].is_string() &&
                      (i == 0 ? absl::EndsWith(exec[i].get<std::string>(), "/" + entry[i])
                              : exec[i].get<std::string>() == entry[i]);
    if (!same) {
      problems.push_back(target + ": ENTRYPOINT does not start " + absl::StrJoin(entry, " "));
      break;
    }
  }
  return problems;
}

std::vector<Stage> KubetrainDockerfile() {
  auto text = ReadFile(SourcePath("deploy/docker/Dockerfile"));
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? ParseDockerfile(*text) : std::vector<Stage>{};
}

TEST(DockerfileTest, EveryImageRunsItsBinaryAsNonRoot) {
  std::vector<Stage> stages = KubetrainDockerfile();
  for (const auto& [target, entry] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"operator", {"kubetrain-operator"}},
           {"runtime", {"kubetrain-runtime"}},
           {"python-runtime", {"kubetrain-runtime", "exec", "--"}}}) {
    std::vector<std::string> problems = ImageProblems(stages, target, entry);
    EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  }
}

// One build stage compiles both binaries; the images take them from the
// `binaries` stage, which is that build stage unless scripts/build-images.sh
// --binaries puts the prebuilt stage in its place.
TEST(DockerfileTest, OneBuildStageCompilesBothBinaries) {
  std::vector<Stage> stages = KubetrainDockerfile();
  int compiling = 0;
  for (const Stage& stage : stages) {
    for (const Instruction& i : stage.instructions) {
      if (i.keyword != "RUN" || !absl::StrContains(i.arguments, "cmake --build")) continue;
      ++compiling;
      EXPECT_EQ(stage.name, "build");
      EXPECT_TRUE(absl::StrContains(i.arguments, "--target kubetrain-operator kubetrain-runtime"))
          << i.arguments;
    }
  }
  EXPECT_EQ(compiling, 1);
  const Stage* binaries = StageNamed(stages, "binaries");
  ASSERT_NE(binaries, nullptr);
  EXPECT_EQ(binaries->base, "build");
  // The operator image is the root filesystem operator-root assembles.
  for (const char* target : {"operator-root", "runtime"}) {
    const Stage* stage = StageNamed(stages, target);
    ASSERT_NE(stage, nullptr) << target;
    bool copies_from_binaries = false;
    for (const Instruction& i : stage->instructions) {
      copies_from_binaries |=
          i.keyword == "COPY" && absl::StartsWith(i.arguments, "--from=binaries ");
    }
    EXPECT_TRUE(copies_from_binaries) << target;
  }
}

// The operator image has no shell: FROM scratch, nothing run in it.
TEST(DockerfileTest, OperatorImageIsScratchWithoutShell) {
  std::vector<Stage> stages = KubetrainDockerfile();
  const Stage* op = StageNamed(stages, "operator");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->base, "scratch");
  for (const Instruction& i : op->instructions) {
    EXPECT_NE(i.keyword, "RUN") << i.arguments;
    if (i.keyword == "CMD") {
      EXPECT_TRUE(absl::StartsWith(i.arguments, "[")) << i.arguments;
    }
  }
}

// Packages come from the shared lists only (scripts/packages/): the build
// stage installs build.txt, the runtime libraries runtime.txt (shared by the
// runtime images and the operator's root filesystem, which adds
// operator.txt), the Python runtime its own list, and no apt-get install
// names a package of its own.
TEST(DockerfileTest, PackagesComeFromTheSharedLists) {
  std::vector<Stage> stages = KubetrainDockerfile();
  const std::map<std::string, std::string> list_of = {{"build", "build.txt"},
                                                      {"runtime-libs", "runtime.txt"},
                                                      {"operator-root", "operator.txt"},
                                                      {"python-runtime", "python-runtime.txt"}};
  for (const Stage& stage : stages) {
    std::string copied;
    for (const Instruction& i : stage.instructions) {
      if (i.keyword == "COPY" && absl::StartsWith(i.arguments, "scripts/packages/")) {
        copied = std::string(absl::StripPrefix(i.arguments, "scripts/packages/"));
        copied = copied.substr(0, copied.find(' '));
      }
      if (i.keyword != "RUN" || !absl::StrContains(i.arguments, "apt-get install")) continue;
      auto list = list_of.find(stage.name);
      ASSERT_NE(list, list_of.end()) << "stage " << stage.name << " installs packages";
      EXPECT_EQ(copied, list->second) << stage.name;
      const std::string install = i.arguments.substr(i.arguments.find("apt-get install"));
      const std::string want =
          "--no-install-recommends $(sed -e 's/#.*//' /tmp/packages/" + list->second + ")";
      EXPECT_TRUE(absl::StartsWith(install, "apt-get install -y " + want)) << install;
    }
  }
  for (const char* stage : {"build", "runtime-libs", "operator-root", "python-runtime"}) {
    EXPECT_NE(StageNamed(stages, stage), nullptr) << stage;
  }
}

TEST(DockerfileTest, BasesAreDebian12ByDefault) {
  auto text = ReadFile(SourcePath("deploy/docker/Dockerfile"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_TRUE(absl::StrContains(*text, "ARG BASE=docker.io/library/debian:12\n"));
  EXPECT_TRUE(absl::StrContains(*text, "ARG RUNTIME_BASE=docker.io/library/debian:12-slim\n"));
  std::vector<Stage> stages = ParseDockerfile(*text);
  ASSERT_NE(StageNamed(stages, "build"), nullptr);
  EXPECT_EQ(StageNamed(stages, "build")->base, "${BASE}");
  // The runtime images and the operator's root filesystem start from
  // runtime-libs, which is the slim base with the runtime libraries.
  ASSERT_NE(StageNamed(stages, "runtime-libs"), nullptr);
  EXPECT_EQ(StageNamed(stages, "runtime-libs")->base, "${RUNTIME_BASE}");
  ASSERT_NE(StageNamed(stages, "runtime"), nullptr);
  EXPECT_EQ(StageNamed(stages, "runtime")->base, "runtime-libs");
  ASSERT_NE(StageNamed(stages, "prebuilt"), nullptr);
  EXPECT_EQ(StageNamed(stages, "prebuilt")->base, "${RUNTIME_BASE}");
}

TEST(DockerfileTest, ParserSeesRootAndShellForm) {
  std::vector<Stage> stages = ParseDockerfile(
      "FROM debian:12 AS build\nRUN make \\\n  all\nFROM debian:12-slim AS final\n"
      "COPY --from=nowhere /a /b\nENTRYPOINT /usr/bin/kubetrain-runtime\n");
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].instructions[0].arguments, "make  all");
  // No USER (root), shell-form ENTRYPOINT, unknown COPY source.
  std::vector<std::string> problems = ImageProblems(stages, "final", {"kubetrain-runtime"});
  EXPECT_EQ(problems.size(), 3u) << absl::StrJoin(problems, "\n");
  // USER is inherited from the stage an image is FROM.
  stages = ParseDockerfile(
      "FROM debian:12 AS base\nUSER 65532\nFROM base AS app\n"
      "ENTRYPOINT [\"/usr/local/bin/kubetrain-runtime\", \"exec\"]\n");
  EXPECT_TRUE(ImageProblems(stages, "app", {"kubetrain-runtime", "exec"}).empty());
  EXPECT_EQ(ImageProblems(stages, "app", {"kubetrain-runtime", "train"}).size(), 1u);
}

}  // namespace
}  // namespace kubetrain::deploy_testing
