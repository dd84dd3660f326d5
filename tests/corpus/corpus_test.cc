// Configurations nobody on the team wrote — Cloud ML configs and Kubeflow
// manifests from public repositories, in ../shared/corpus (its SOURCES.md
// says where each comes from) — through the entry points a user has:
// `kubetrain validate`, `kubetrain convert` and `kubetrain jobs submit
// training` against the fake API server, which validates every TrainingJob
// against the CRD's schema as a real one does. The files are read in place;
// without the folder every test here skips, saying so.
//
// Each test prints its counts and every refusal, grouped by reason, so that
// a run shows where kubetrain stands on real input.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/codec.h"
#include "api/crd.h"
#include "cli/cli.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain {
namespace {

namespace fs = std::filesystem;
using fake_apiserver::FakeApiServer;
using nlohmann::json;

const fs::path kCorpus = fs::path(KUBETRAIN_SOURCE_DIR) / ".." / "shared" / "corpus";
// Cloud ML's runtime versions, as a cluster that runs these configs
// registers them.
const std::string kCloudMlRuntimes =
    (fs::path(KUBETRAIN_SOURCE_DIR) / "tests" / "corpus" / "cloudml_runtimes.yaml").string();
constexpr char kNamespace[] = "corpus";

std::vector<fs::path> FilesIn(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct CliResult {
  int code = 0;
  std::string out;
  std::string err;
};

CliResult Kubetrain(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CliResult result;
  result.code = cli::RunCli(args, out, err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

// The reason of an error line "file:line:column: path: reason", with the
// values that differ from file to file (quoted strings, numbers) blanked, so
// that refusals group by kind.
std::string ReasonOf(const std::string& output) {
  std::string first = output.substr(0, output.find('\n'));
  std::vector<std::string> parts = absl::StrSplit(first, absl::MaxSplits(": ", 2));
  std::string reason = parts.size() == 3 ? absl::StrCat(parts[1], ": ", parts[2]) : first;
  reason = std::regex_replace(reason, std::regex("^[0-9]+:[0-9]+: "), "");
  reason = std::regex_replace(reason, std::regex("\"[^\"]*\""), "\"…\"");
  reason = std::regex_replace(reason, std::regex("\\[[0-9]+\\]"), "[N]");
  return std::regex_replace(reason, std::regex("\\b[0-9]+(\\.[0-9]+)?\\b"), "N");
}

// Prints "label: accepted N of M", then the refusals grouped by reason.
void Report(const std::string& label, size_t accepted, size_t total,
            const std::map<std::string, std::vector<std::string>>& refusals) {
  std::cout << label << ": accepted " << accepted << " of " << total << "\n";
  for (const auto& [reason, files] : refusals) {
    std::cout << "  refused (" << files.size() << "): " << reason << "\n";
    for (const std::string& file : files) std::cout << "      " << file << "\n";
  }
}

// How many files are refused for each field (the reason up to its first
// ": "): what the corpus tests pin, so that a file refused anew, or one no
// longer refused, shows as a change to look at (and the pin is updated with
// it when the change is the intended one).
std::map<std::string, size_t> RefusedByField(
    const std::map<std::string, std::vector<std::string>>& refusals) {
  std::map<std::string, size_t> counts;
  for (const auto& [reason, files] : refusals) {
    counts[reason.substr(0, reason.find(": "))] += files.size();
  }
  return counts;
}

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(kCorpus)) {
      GTEST_SKIP() << "the corpus of real configs (../shared/corpus beside the repository) is "
                      "absent; these tests read it in place";
    }
    StartServer(FakeApiServer::Options());
    // `kubetrain jobs` reads the kubeconfig and backend from the environment.
    const std::string kubeconfig = dir_.path() + "/kubeconfig";
    std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                              << "clusters: [{name: k, cluster: {server: '" << server_->url()
                              << "'}}]\n"
                              << "users: [{name: u, user: {token: t}}]\n"
                              << "contexts: [{name: c, context: {cluster: k, user: u, namespace: "
                              << kNamespace << "}}]\n";
    setenv("KUBECONFIG", kubeconfig.c_str(), 1);
    unsetenv("KUBETRAIN_BACKEND");
  }

  void StartServer(FakeApiServer::Options options) {
    auto server = FakeApiServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // Creates `manifest` (YAML text, as `kubectl create -f` sends it) through
  // the fake API server: "" when stored, else the server's refusal.
  // Each TrainingJob of `text` (one document, or several: convert passes
  // a file's other objects through); "" when the server stores them all.
  std::string Apply(const std::string& text) {
    std::vector<api::YamlDocumentText> documents = api::SplitYamlDocuments(text);
    if (documents.size() > 1) {
      std::string refusals;
      int jobs = 0;
      for (const api::YamlDocumentText& document : documents) {
        if (document.empty || document.text.find("kind: TrainingJob") == std::string_view::npos)
          continue;
        ++jobs;
        refusals += ApplyOne(std::string(document.text));
      }
      return jobs == 0 ? "no TrainingJob among the documents" : refusals;
    }
    return ApplyOne(text);
  }
  std::string ApplyOne(const std::string& text) {
    api::DecodedDocument document = api::DecodeDocument(text);
    if (!document.errors.empty()) return api::FormatErrors(document.errors);
    json object = document.value;
    std::string ns = object.value("/metadata/namespace"_json_pointer, std::string(kNamespace));
    absl::StatusOr<json> created = server_->Create("trainingjobs", ns, object);
    if (!created.ok()) return std::string(created.status().message());
    // Manifests of different files share names: each is gone before the next.
    absl::Status deleted = server_->Delete(
        "trainingjobs", ns, created->value("/metadata/name"_json_pointer, std::string()));
    return deleted.ok() ? "" : std::string(deleted.message());
  }

  // Every kubeflow/ manifest that `kubetrain convert` converts, applied as
  // printed: the files it converted and the server's refusals by file.
  std::map<std::string, std::string> ApplyConvertedManifests(size_t* converted) {
    std::map<std::string, std::string> refused;
    *converted = 0;
    for (const fs::path& file : FilesIn(kCorpus / "kubeflow")) {
      CliResult convert = Kubetrain({"convert", file.string()});
      if (convert.code != 0) continue;
      ++*converted;
      if (std::string refusal = Apply(convert.out); !refusal.empty()) {
        refused[file.filename().string()] = refusal;
      }
    }
    return refused;
  }

  test_support::TempDir dir_;
  std::unique_ptr<FakeApiServer> server_;
};

// Cloud ML configs: what `validate` accepts, `jobs submit training --config`
// submits, and the API server stores (the CRD's schema takes it).
TEST_F(CorpusTest, CloudMlConfigsThatValidateAcceptsTheApiServerStores) {
  const std::vector<fs::path> files = FilesIn(kCorpus / "cloudml");
  ASSERT_FALSE(files.empty());
  std::map<std::string, std::vector<std::string>> refusals;
  size_t accepted = 0;
  int id = 0;
  // The earlier study that the configs which go on with one, and leave their
  // params to it (Cloud ML's resumePreviousJobId), name: submission copies
  // its params.
  ASSERT_TRUE(server_
                  ->Create("trainingjobs", kNamespace,
                           json::parse(R"({"apiVersion": "kubetrain.io/v1", "kind": "TrainingJob",
                             "metadata": {"name": "hyper1-1"},
                             "spec": {"trainingInput": {"hyperparameters": {"goal": "MAXIMIZE",
                               "params": [{"parameterName": "lr", "type": "DOUBLE",
                                           "minValue": 0.001, "maxValue": 0.1}]}}}})"))
                  .ok());
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    CliResult validate =
        Kubetrain({"validate", "--runtime-catalog", kCloudMlRuntimes, file.string()});
    if (validate.code != 0) {
      refusals[ReasonOf(validate.out.substr(file.string().size() + 1))].push_back(name);
      continue;
    }
    ++accepted;
    const std::string job = absl::StrCat("corpus_", ++id);
    CliResult submit = Kubetrain({"jobs", "submit", "training", job, "--config", file.string(),
                                  "--runtime-catalog", kCloudMlRuntimes});
    EXPECT_EQ(submit.code, 0) << name << ": validate accepts it, but the submission failed:\n"
                              << submit.out << submit.err;
    if (submit.code == 0) {
      EXPECT_TRUE(server_->Get("trainingjobs", kNamespace, absl::StrCat("corpus-", id)).ok())
          << name;
    }
  }
  Report("cloudml", accepted, files.size(), refusals);
  EXPECT_EQ(server_->Count("trainingjobs"), accepted + 1);  // and the earlier study
  // With the runtime catalog of Cloud ML's versions, what is left: TPUs
  // (no equivalent), a machine type Cloud ML did not offer (n1-highcpu-8),
  // and errors in the files themselves. A 0 maxParallelTrials is Cloud ML's
  // unset, and accepted.
  EXPECT_EQ(RefusedByField(refusals),
            (std::map<std::string, size_t>{
                {"customCommands", 1},
                {"trainingInput.hyperparameters.params[N].discreteValues[N]", 1},
                {"trainingInput.hyperparameters.params[N].minValue", 2},
                {"trainingInput.hyperparameters.params[N].parameterName", 1},
                {"trainingInput.masterType", 3},
                {"trainingInput.scaleTier", 2},
                {"trainingInput.workerConfig.acceleratorConfig.type", 2},
                {"trainingInput.workerType", 5},
            }));
}

// Kubeflow manifests: what `convert` prints, `kubectl apply` would store,
// and `validate` takes back as it is.
TEST_F(CorpusTest, KubeflowManifestsThatConvertConvertToWhatTheApiServerStores) {
  const std::vector<fs::path> files = FilesIn(kCorpus / "kubeflow");
  ASSERT_FALSE(files.empty());
  std::map<std::string, std::vector<std::string>> refusals;
  size_t converted = 0;
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    CliResult convert = Kubetrain({"convert", file.string()});
    if (convert.code != 0) {
      refusals[ReasonOf(convert.err.substr(file.string().size() + 1))].push_back(name);
      continue;
    }
    ++converted;
    EXPECT_EQ(Apply(convert.out), "") << name << ": the API server refuses what convert printed:\n"
                                      << convert.out;
    const std::string printed = dir_.path() + "/converted.yaml";
    std::ofstream(printed) << convert.out;
    CliResult again = Kubetrain({"validate", printed});
    EXPECT_EQ(again.code, 0) << name << ": validate refuses what convert printed:\n" << again.out;
  }
  Report("kubeflow", converted, files.size(), refusals);
  // What kubetrain cannot run: elastic jobs scaled by an autoscaler, and a
  // GPU request left empty (`nvidia.com/gpu:` with no value, which the API
  // server refuses too). (Containers without a command run their image's
  // entrypoint; a file's other documents pass through; elastic jobs
  // without autoscaling convert.)
  EXPECT_EQ(RefusedByField(refusals),
            (std::map<std::string, size_t>{
                {"spec.elasticPolicy.metrics", 6},
                {"spec.pytorchReplicaSpecs.Worker.template.spec.containers[N].resources.limits."
                 "nvidia.com/gpu",
                 2},
            }));
}

// Every example the project ships is a manifest the API server takes: a
// TrainingJob as written, a Kubeflow job as `convert` prints it.
TEST_F(CorpusTest, ExamplesThatValidateAcceptsTheApiServerStores) {
  int manifests = 0;
  int kubeflow = 0;
  for (const auto& entry :
       fs::recursive_directory_iterator(fs::path(KUBETRAIN_SOURCE_DIR) / "examples")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string text = Slurp(entry.path());
    if (absl::StrContains(text, "apiVersion: kubeflow.org/v1")) {
      ++kubeflow;
      CliResult convert = Kubetrain({"convert", entry.path().string()});
      EXPECT_EQ(convert.code, 0) << entry.path() << ": " << convert.err;
      EXPECT_EQ(Apply(convert.out), "") << entry.path() << ": the API server refuses:\n"
                                        << convert.out;
      continue;
    }
    if (!absl::StrContains(text, "kind: TrainingJob")) continue;
    ++manifests;
    CliResult validate = Kubetrain({"validate", entry.path().string()});
    EXPECT_EQ(validate.code, 0) << validate.out;
    EXPECT_EQ(Apply(text), "") << entry.path();
  }
  EXPECT_GT(manifests, 3);
  EXPECT_GE(kubeflow, 2);  // examples/pytorch: the DDP job and the elastic one
}

// broken/: refused, each with a message that points at the line and names
// the field (or says what YAML could not read there).
TEST_F(CorpusTest, BrokenFilesAreRefusedNamingTheLine) {
  const std::vector<fs::path> files = FilesIn(kCorpus / "broken");
  ASSERT_FALSE(files.empty());
  std::map<std::string, std::vector<std::string>> refusals;
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    CliResult validate = Kubetrain({"validate", file.string()});
    EXPECT_NE(validate.code, 0) << name << " is accepted";
    const std::string first = validate.out.substr(0, validate.out.find('\n'));
    EXPECT_TRUE(std::regex_search(first, std::regex("^[^:]+:[0-9]+:[0-9]+: ")))
        << name << ": the refusal names no line: " << first;
    refusals[ReasonOf(validate.out.substr(file.string().size() + 1))].push_back(name);
  }
  Report("broken", 0, files.size(), refusals);
}

// templated/: files still to be filled in (envsubst, kustomize vars,
// ksonnet): refused, each naming a placeholder the file holds at the line
// the refusal points to, whether YAML reads the file or not.
TEST_F(CorpusTest, TemplatedFilesAreRefusedNamingThePlaceholder) {
  const std::vector<fs::path> files = FilesIn(kCorpus / "templated");
  ASSERT_FALSE(files.empty());
  std::map<std::string, std::vector<std::string>> refusals;
  const std::regex refusal(R"re(^[^:]+:([0-9]+):[0-9]+: .*"([^"]+)" is a template placeholder )re"
                           R"re(left in the file: fill it in first)re");
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    CliResult validate = Kubetrain({"validate", file.string()});
    EXPECT_NE(validate.code, 0) << name << " is accepted";
    const std::string first = validate.out.substr(0, validate.out.find('\n'));
    std::smatch match;
    if (!std::regex_search(first, match, refusal)) {
      ADD_FAILURE() << name << ": the refusal names no placeholder: " << first;
      continue;
    }
    std::vector<std::string> lines = absl::StrSplit(test_support::ReadFile(file.string()), '\n');
    const size_t line = std::stoul(match[1]);
    ASSERT_LE(line, lines.size()) << first;
    EXPECT_THAT(lines[line - 1], ::testing::HasSubstr(match[2].str())) << name << ": " << first;
    refusals[ReasonOf(validate.out.substr(file.string().size() + 1))].push_back(name);
  }
  Report("templated", 0, files.size(), refusals);
}

// The same apply, against a CRD whose workerCount is planted as a string:
// the check above must see it.
TEST_F(CorpusTest, APlantedSchemaChangeIsCaught) {
  FakeApiServer::Options options;
  options.serve_training_job_crd = false;
  StartServer(options);
  json crd = api::TrainingJobCrd();
  json& input = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                   ["properties"]["trainingInput"]["properties"];
  input["workerCount"] = {{"type", "string"}};
  ASSERT_TRUE(server_->ServeCrd(crd).ok());
  size_t converted = 0;
  std::map<std::string, std::string> refused = ApplyConvertedManifests(&converted);
  ASSERT_GT(converted, 0u);
  ASSERT_FALSE(refused.empty()) << "no converted manifest was refused with the planted schema";
  for (const auto& [file, refusal] : refused) {
    EXPECT_THAT(refusal, ::testing::HasSubstr("spec.trainingInput.workerCount")) << file;
  }
}

}  // namespace
}  // namespace kubetrain
