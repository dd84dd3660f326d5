#include "cli/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"

namespace kubetrain::cli {
namespace {

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result RunKubetrain(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

const std::string kExamples = std::string(KUBETRAIN_SOURCE_DIR) + "/examples/";

TEST(ValidateCommandTest, AcceptsTheCloudMlConfigAndEveryExample) {
  std::vector<std::string> args = {"validate"};
  for (const auto& entry : std::filesystem::directory_iterator(kExamples)) {
    if (entry.path().extension() == ".yaml") args.push_back(entry.path().string());
  }
  Result r = RunKubetrain(args);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr(kExamples + "cloudml-config.yaml: ok\n"));
}

TEST(ValidateCommandTest, AcceptsThePackageAndOwnImageExamples) {
  Result r = RunKubetrain({"validate", kExamples + "python-package/trainingjob.yaml",
                           kExamples + "python-package/hptuning_config.yaml",
                           kExamples + "own-image/trainingjob.yaml"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

TEST(ValidateCommandTest, PrintsEveryErrorWithFileAndExitsTwo) {
  const std::string path = ::testing::TempDir() + "/bad.yaml";
  std::ofstream(path) << "trainingInput:\n  scaleTier: CUSTOM\n  workerCount: -1\n";
  Result r = RunKubetrain({"validate", path});
  EXPECT_EQ(r.code, 2);
  // A missing field points at its enclosing block.
  EXPECT_EQ(r.out, path + ":1:1: trainingInput.masterType: required when scaleTier is CUSTOM\n" +
                       path + ":3:3: trainingInput.workerCount: must be >= 0, got -1\n");
}

TEST(ValidateCommandTest, MissingFileIsNamed) {
  Result r = RunKubetrain({"validate", "/nonexistent/job.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "/nonexistent/job.yaml: cannot open: No such file or directory\n");
}

TEST(CliTest, UnknownCommandAndFlagAreUsageErrors) {
  Result r = RunKubetrain({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("unknown command \"frobnicate\""));
  r = RunKubetrain({"validate", "--strict", "x.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "kubetrain validate: unknown flag --strict\n");
}

TEST(ValidateCommandTest, ADirectoryIsNamedAsOne) {
  Result r = RunKubetrain({"validate", ::testing::TempDir()});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.out, ::testing::HasSubstr("is a directory, not a job file"));
}

TEST(ParseArgsTest, AValueFlagDoesNotSwallowTheNextFlag) {
  ParsedArgs parsed =
      ParseArgs({"job", "--job-dir", "--stream-logs"}, {"job-dir"}, {"stream-logs"});
  EXPECT_EQ(
      parsed.error,
      "flag --job-dir needs a value, got flag --stream-logs (write --job-dir=VALUE for a value "
      "that starts with --)");
  parsed = ParseArgs({"--job-dir", "--", "--lr=0.1"}, {"job-dir"}, {});
  EXPECT_THAT(parsed.error, ::testing::HasSubstr("flag --job-dir needs a value, got \"--\""));
  parsed = ParseArgs({"--job-dir=--odd", "--job-dir", "/out", "--", "--lr=0.1"}, {"job-dir"}, {});
  EXPECT_EQ(parsed.error, "");
  ASSERT_EQ(parsed.flags.size(), 2u);
  EXPECT_EQ(parsed.flags[0].second, "--odd");
  EXPECT_EQ(*parsed.Flag("job-dir"), "/out");
  EXPECT_EQ(parsed.after_double_dash, std::vector<std::string>{"--lr=0.1"});
}

TEST(ParseArgsTest, NamespaceHasKubectlsShortForms) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"job", "-n", "ml"},
                                             {"job", "-nml"},
                                             {"job", "-n=ml"},
                                             {"job", "--namespace", "ml"},
                                             {"job", "--namespace=ml"}}) {
    ParsedArgs parsed = ParseArgs(args, {"namespace"}, {"local"});
    EXPECT_EQ(parsed.error, "") << args[1];
    ASSERT_NE(parsed.Flag("namespace"), nullptr) << args[1];
    EXPECT_EQ(*parsed.Flag("namespace"), "ml");
    EXPECT_EQ(parsed.positional, std::vector<std::string>{"job"});
  }
  // Only where --namespace is a flag of the command; other letters are unknown.
  EXPECT_EQ(ParseArgs({"job", "-n", "ml"}, {}, {}).error, "unknown flag -n");
  EXPECT_EQ(ParseArgs({"job", "-q"}, {"namespace"}, {}).error, "unknown flag -q");
  EXPECT_EQ(ParseArgs({"-n"}, {"namespace"}, {}).error, "flag --namespace needs a value");
  // The trainer's own flags after "--" are not read.
  EXPECT_EQ(ParseArgs({"job", "--", "-n", "3"}, {}, {}).after_double_dash,
            (std::vector<std::string>{"-n", "3"}));
}

TEST(ParseArgsTest, ARepeatedFlagKeepsEveryValueInOrderAndTheLastWins) {
  ParsedArgs parsed = ParseArgs({"--labels", "a=1", "--namespace=x", "job", "--labels=b=2", "-n",
                                 "y", "--local", "--local=false"},
                                {"labels", "namespace"}, {"local"});
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(parsed.flags, (std::vector<std::pair<std::string, std::string>>{{"labels", "a=1"},
                                                                            {"namespace", "x"},
                                                                            {"labels", "b=2"},
                                                                            {"namespace", "y"},
                                                                            {"local", "true"},
                                                                            {"local", "false"}}));
  EXPECT_EQ(*parsed.Flag("namespace"), "y");
  EXPECT_EQ(*parsed.Flag("local"), "false");
  EXPECT_EQ(parsed.positional, std::vector<std::string>{"job"});
}

TEST(ParseArgsTest, AValueMayStartWithADashOrBeEmpty) {
  ParsedArgs parsed =
      ParseArgs({"--job-dir", "-x", "-n-y", "--lr", "-5", "-"}, {"job-dir", "namespace", "lr"}, {});
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(*parsed.Flag("job-dir"), "-x");
  EXPECT_EQ(*parsed.Flag("namespace"), "-y");
  EXPECT_EQ(*parsed.Flag("lr"), "-5");
  EXPECT_EQ(parsed.positional, std::vector<std::string>{"-"});
  parsed = ParseArgs({"--job-dir=", "job", "-n="}, {"job-dir", "namespace"}, {});
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(*parsed.Flag("job-dir"), "");
  EXPECT_EQ(*parsed.Flag("namespace"), "");
  EXPECT_EQ(parsed.positional, std::vector<std::string>{"job"});
  parsed = ParseArgs({"-n", "--local"}, {"namespace"}, {"local"});
  EXPECT_EQ(parsed.error,
            "flag --namespace needs a value, got flag --local (write --namespace=VALUE for a "
            "value that starts with --)");
}

TEST(ParseArgsTest, ABoolFlagTakesTrueOrFalseOnlyAfterAnEqualsSign) {
  ParsedArgs parsed = ParseArgs({"--local", "true"}, {}, {"local"});
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(*parsed.Flag("local"), "true");
  EXPECT_EQ(parsed.positional, std::vector<std::string>{"true"});
  EXPECT_EQ(ParseArgs({"--local=yes"}, {}, {"local"}).error,
            "flag --local takes true or false, got \"yes\"");
  EXPECT_EQ(ParseArgs({"--local="}, {}, {"local"}).error,
            "flag --local takes true or false, got \"\"");
}

TEST(ParseArgsTest, TheFirstProblemOnTheLineIsTheOneReported) {
  EXPECT_EQ(ParseArgs({"--bogus=1", "--job-dir"}, {"job-dir"}, {}).error, "unknown flag --bogus");
  EXPECT_EQ(ParseArgs({"-xyz", "--job-dir", "--local"}, {"job-dir"}, {"local"}).error,
            "unknown flag -x");
  EXPECT_EQ(ParseArgs({"job", "---x=1", "--bogus"}, {}, {}).error, "unknown flag ---x");
  EXPECT_EQ(ParseArgs({"--local=no", "--bogus"}, {}, {"local"}).error,
            "flag --local takes true or false, got \"no\"");
  EXPECT_EQ(ParseArgs({"--bogus", "--local=no"}, {}, {"local"}).error, "unknown flag --bogus");
  // What follows "--" is the trainer's, however it looks.
  ParsedArgs parsed = ParseArgs({"job", "--", "--bogus", "--"}, {}, {});
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(parsed.after_double_dash, (std::vector<std::string>{"--bogus", "--"}));
}

TEST(SubmitCommandTest, PackagePathIsCheckedBeforeAnythingIsSubmitted) {
  const std::string package =
      (std::filesystem::path(::testing::TempDir()) / "trainer").lexically_normal().string();
  std::filesystem::create_directories(package);
  Result r = RunKubetrain({"jobs", "submit", "training", "j1", "--local", "--package-path",
                           "/nonexistent/trainer", "--module-name", "trainer.task"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("--package-path: /nonexistent/trainer is not a folder"));
  r = RunKubetrain({"jobs", "submit", "training", "j1", "--local", "--package-path", package});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("--package-path needs --module-name"));
  r = RunKubetrain({"jobs", "submit", "training", "j1", "--local", "--package-path", package,
                    "--module-name", "other.task"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr(
                         "--module-name other.task is not in the package at " + package +
                         ": its first part must be the package's folder name \"trainer\""));
}

// The local backend runs an image's entrypoint with podman: without it, a
// replica that would run one is refused before anything is recorded.
TEST(SubmitCommandTest, WithoutPodmanTheLocalBackendRefusesAnImagesEntrypoint) {
  const std::string dir = ::testing::TempDir() + "/entrypoint_local_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/home");
  const std::string config = dir + "/config.yaml";
  std::ofstream(config) << "trainingInput:\n  scaleTier: CUSTOM\n  masterType: standard\n"
                           "  masterConfig: {imageUri: registry.example.com/trainer:1}\n";
  setenv("KUBETRAIN_HOME", (dir + "/home").c_str(), 1);
  const std::string path = std::getenv("PATH");
  setenv("PATH", dir.c_str(), 1);  // no podman there
  unsetenv("KUBETRAIN_PODMAN");
  Result r = RunKubetrain({"jobs", "submit", "training", "j1", "--local", "--config", config});
  setenv("PATH", path.c_str(), 1);
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, ::testing::HasSubstr(
                         "spec.trainingInput.masterConfig.imageUri: the master runs the "
                         "entrypoint of image registry.example.com/trainer:1 (no "
                         "containerCommand), and the local backend runs images with podman, "
                         "which is not on PATH (nor named by KUBETRAIN_PODMAN): install podman, "
                         "give containerCommand, the command to run on this machine, or submit "
                         "the job to a cluster"));
  r = RunKubetrain({"jobs", "list", "--local"});
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("j1")));
  unsetenv("KUBETRAIN_HOME");
  std::filesystem::remove_all(dir);
}

TEST(LocalTrainCommandTest, StartPortIsATcpPort) {
  Result r = RunKubetrain({"local", "train", "--start-port", "70000"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "kubetrain local train: --start-port: a TCP port from 1 to 65535, got \"70000\"\n");
  r = RunKubetrain({"local", "train", "--distributed", "--start-port", "65534"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err,
              ::testing::HasSubstr("--start-port 65534: the 5 replicas need ports up to 65538"));
}

const std::string kKubeflow = std::string(KUBETRAIN_SOURCE_DIR) + "/api/testdata/kubeflow/";

TEST(KubeflowManifestTest, ValidateSaysWhatEachFieldBecame) {
  Result r = RunKubetrain({"validate", kKubeflow + "pytorch-gpu.yaml"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith(
                         kKubeflow + "pytorch-gpu.yaml: ok (a kubeflow.org/v1 PyTorchJob, run as "
                                     "the TrainingJob `kubetrain convert` prints)\n"
                                     "  kind -> spec.trainingInput.framework: PYTORCH\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("  spec.pytorchReplicaSpecs.Worker.replicas -> "
                                          "spec.trainingInput.workerCount: 3\n"));
  r = RunKubetrain({"validate", kKubeflow + "tf-gang-scheduling-invalid.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.out,
              ::testing::HasSubstr(kKubeflow + "tf-gang-scheduling-invalid.yaml:9:7: "
                                               "spec.runPolicy.schedulingPolicy.minAvailable: "
                                               "expected an integer >= 1, got 0"));
}

TEST(KubeflowManifestTest, ThePyTorchExamplesValidate) {
  const std::string examples = kExamples + "pytorch/";
  Result r =
      RunKubetrain({"validate", examples + "pytorchjob.yaml", examples + "trainingjob.yaml"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr(examples + "pytorchjob.yaml: ok (a kubeflow.org/v1 "
                                                     "PyTorchJob"));
  EXPECT_THAT(r.out, ::testing::HasSubstr(examples + "trainingjob.yaml: ok\n"));
}

TEST(KubeflowManifestTest, ConvertPrintsATrainingJobThatValidates) {
  Result r = RunKubetrain({"convert", kKubeflow + "tf-chief-workers-evaluator.yaml"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith(
                         "# kubetrain convert " + kKubeflow +
                         "tf-chief-workers-evaluator.yaml: the kubeflow.org/v1 TFJob as a "
                         "TrainingJob\n#   kind -> spec.trainingInput.framework: TENSORFLOW\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("\napiVersion: kubetrain.io/v1\nkind: TrainingJob\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("    useChiefInTfConfig: true\n"));
  const std::string converted = ::testing::TempDir() + "/converted.yaml";
  std::ofstream(converted) << r.out;
  Result again = RunKubetrain({"validate", converted});
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(again.out, converted + ": ok\n");

  r = RunKubetrain({"convert", kKubeflow + "pytorch-elastic-hpa.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, ::testing::HasSubstr(kKubeflow + "pytorch-elastic-hpa.yaml:12:5: "
                                                      "spec.elasticPolicy.metrics: no equivalent"));
  r = RunKubetrain({"convert", converted});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "kubetrain convert: " + converted +
                       ": not a kubeflow.org/v1 TFJob or PyTorchJob; it runs as it is\n");
}

// A job beside a Service and a ConfigMap: the job converts, the others pass
// through as written, in their order; an error names its line in the file.
TEST(KubeflowManifestTest, ConvertPassesTheOtherDocumentsOfAFileThrough) {
  const std::string file = kKubeflow + "pytorch-beside-other-objects.yaml";
  Result r = RunKubetrain({"convert", file});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> documents = absl::StrSplit(r.out, "---\n");
  ASSERT_EQ(documents.size(), 3u) << r.out;
  EXPECT_THAT(documents[0], ::testing::EndsWith("apiVersion: v1\nkind: Service\nmetadata:\n  name: "
                                                "tensorboard\nspec:\n  ports: [{port: 6006}]\n"));
  EXPECT_THAT(documents[1], ::testing::StartsWith("# kubetrain convert " + file +
                                                  " (line 10): the kubeflow.org/v1 PyTorchJob as a "
                                                  "TrainingJob\n"));
  EXPECT_THAT(documents[1],
              ::testing::HasSubstr("\nkind: TrainingJob\nmetadata:\n  name: mnist\n"));
  EXPECT_EQ(documents[2],
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: \"1\"}\n");
  // What is printed converts no more, and validates as it is.
  const std::string converted = ::testing::TempDir() + "/converted-job.yaml";
  std::ofstream(converted) << documents[1];
  EXPECT_EQ(RunKubetrain({"validate", converted}).code, 0);

  const std::string elastic = ::testing::TempDir() + "/elastic-beside.yaml";
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(elastic) << absl::StrReplaceAll(
      text, {{"  pytorchReplicaSpecs:\n",
              "  elasticPolicy: {minReplicas: 1, metrics: []}\n  pytorchReplicaSpecs:\n"}});
  r = RunKubetrain({"convert", elastic});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err,
              ::testing::HasSubstr(elastic + ":15:35: spec.elasticPolicy.metrics: no equivalent"));
}

TEST(KubeflowManifestTest, RenderShowsThePodsWithTheirPyTorchEnvironment) {
  // The manifest's namespace, as kubectl apply takes it.
  Result r = RunKubetrain({"render", kKubeflow + "pytorch-run-policy.yaml"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith(kKubeflow + "pytorch-run-policy.yaml: a kubeflow.org/v1 "
                                                       "PyTorchJob, rendered as the TrainingJob it "
                                                       "converts to:\n"));
  // Worker 0 is rank 1; rank 0 is the master's Service, on the manifest's port.
  EXPECT_THAT(r.out,
              ::testing::HasSubstr(
                  "    - name: MASTER_ADDR\n      value: pytorch-simple-master-0.kubeflow.svc\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("    - name: MASTER_PORT\n      value: '29500'\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("    - name: RANK\n      value: '1'\n"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("TF_CONFIG")));
  EXPECT_THAT(r.out, ::testing::HasSubstr("name: log-shipper"));
}

// An elastic PyTorchJob's pods carry torchrun's rendezvous, at the master
// (worker 0 before conversion), and no ranks of their own.
TEST(KubeflowManifestTest, RenderShowsAnElasticJobsRendezvous) {
  Result r = RunKubetrain({"render", kKubeflow + "pytorch-elastic.yaml", "--namespace", "ml"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* env : {
           "    - name: PET_NNODES\n      value: '1:4'\n",
           "    - name: PET_RDZV_BACKEND\n      value: c10d\n",
           "    - name: PET_RDZV_ENDPOINT\n      value: elastic-imagenet-master-0.ml.svc:23456\n",
           "    - name: PET_RDZV_ID\n      value: imagenet\n",
           "    - name: PET_RDZV_CONF\n      value: join_timeout=900,is_host=true\n",
           "    - name: PET_RDZV_CONF\n      value: join_timeout=900,is_host=false\n",
           "    - name: PET_MAX_RESTARTS\n      value: '10'\n",
       }) {
    EXPECT_THAT(r.out, ::testing::HasSubstr(env));
  }
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("name: RANK\n")));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("name: MASTER_ADDR\n")));
}

// A job without imageUri runs the runtime image this version's build makes
// (scripts/build-images.sh), pulled IfNotPresent so clusters without a
// registry run it from the archive loaded onto their nodes.
TEST(RenderCommandTest, BasicExampleRunsTheVersionedRuntimeImage) {
  Result r = RunKubetrain({"render", kExamples + "basic.yaml"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("    image: kubetrain/kubetrain-runtime:" +
                                          std::string(KUBETRAIN_TEST_VERSION) +
                                          "\n    imagePullPolicy: IfNotPresent\n"));
}

// A config for Cloud ML's runtime 1.15: refused where only kubetrain's own
// runtime is on offer, accepted (and rendered in the registered image, with
// its Python) given a catalog that has it: by --runtime-catalog, or as this
// machine's $KUBETRAIN_HOME/runtimes.yaml. A catalog that does not read is
// named with its line.
TEST(RuntimeCatalogTest, ValidateAndRenderUseTheCatalogThatHasTheRuntime) {
  const std::string dir = ::testing::TempDir() + "/runtime_catalog_cli_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/home");
  const std::string job = dir + "/job.yaml";
  std::ofstream(job) << "apiVersion: kubetrain.io/v1\nkind: TrainingJob\nmetadata: {name: tf1}\n"
                        "spec:\n  trainingInput:\n    pythonModule: trainer.task\n"
                        "    packageUris: [/pkg]\n    runtimeVersion: \"1.15\"\n"
                        "    pythonVersion: \"3.7\"\n";
  const std::string catalog = dir + "/runtimes.yaml";
  std::ofstream(catalog) << "runtimes:\n- runtimeVersion: \"1.15\"\n  pythonVersion: \"3.7\"\n"
                            "  image: registry.example.com/tf:1.15\n  python: python3.7\n";
  setenv("KUBETRAIN_HOME", (dir + "/home").c_str(), 1);

  Result r = RunKubetrain({"validate", job});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.out, ::testing::HasSubstr(
                         "trainingInput.runtimeVersion: no runtime \"1.15\" in the runtime catalog "
                         "(built in); on offer: runtimeVersion "));
  r = RunKubetrain({"validate", "--runtime-catalog", catalog, job});
  EXPECT_EQ(r.code, 0) << r.out;

  std::filesystem::copy_file(catalog, dir + "/home/runtimes.yaml");
  r = RunKubetrain({"validate", job});
  EXPECT_EQ(r.code, 0) << r.out;
  r = RunKubetrain({"render", job});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("image: registry.example.com/tf:1.15\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("- python3.7\n"));

  std::ofstream(dir + "/bad.yaml") << "runtimes:\n- {runtimeVersion: \"1.15\"}\n";
  r = RunKubetrain({"validate", "--runtime-catalog", dir + "/bad.yaml", job});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err,
              ::testing::HasSubstr(dir + "/bad.yaml:2: runtimes[0].pythonVersion: required"));
  unsetenv("KUBETRAIN_HOME");
  std::filesystem::remove_all(dir);
}

// A table of every `jobs` verb the tool has against each of kubectl's
// spellings of the namespace flag: each verb reads -n as --namespace. With
// --local, which has no namespaces, each one refuses the namespace it read
// (rather than "unknown flag -n"), before any backend is touched; the cluster
// side is tests/local/cluster_jobs_test.cc.
TEST(JobsFlagsTest, EveryJobsVerbReadsDashNAsItsNamespace) {
  const std::vector<std::vector<std::string>> spellings = {
      {"-n", "ml"}, {"-nml"}, {"-n=ml"}, {"--namespace", "ml"}, {"--namespace=ml"}};
  std::vector<std::string> verbs;
  for (const Command& command : JobsCommands()) {
    std::string words;
    for (const std::string& w : command.words) words += (words.empty() ? "" : " ") + w;
    verbs.push_back(words);
    EXPECT_THAT(command.synopsis, ::testing::HasSubstr("-n, --namespace NS")) << words;
    for (const std::vector<std::string>& spelling : spellings) {
      std::vector<std::string> args = command.words;
      args.push_back("some_job");
      args.insert(args.end(), spelling.begin(), spelling.end());
      args.push_back("--local");
      Result r = RunKubetrain(args);
      EXPECT_EQ(r.code, 2) << words << " " << spelling[0];
      EXPECT_THAT(r.err, ::testing::HasSubstr("-n/--namespace names a Kubernetes namespace"))
          << words << " " << spelling[0];
    }
  }
  EXPECT_EQ(verbs, (std::vector<std::string>{"jobs submit training", "jobs describe", "jobs list",
                                             "jobs cancel", "jobs stream-logs"}));
  // A command without --namespace has no -n either.
  Result r = RunKubetrain({"validate", "-n", "ml", "job.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("unknown flag -n"));
}

TEST(CliTest, EveryCommandTakesHelp) {
  Result r = RunKubetrain({"validate", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Usage: kubetrain validate FILE...\n\ncheck TrainingJob manifests or Cloud ML "
            "config.yaml files\n\nFlags:\n      --runtime-catalog FILE  the runtime catalog "
            "runtimeVersion/pythonVersion are checked against (default: "
            "$KUBETRAIN_HOME/runtimes.yaml, else the built-in one)\n");
  // After "--" it is the trainer's flag, not a request for help.
  r = RunKubetrain({"validate", "--", "--help"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  r = RunKubetrain({"jobs", "submit", "training", "-h"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out,
              ::testing::StartsWith("Usage: kubetrain jobs submit training JOB [--config FILE]"));
}

std::string Words(const Command& command) { return absl::StrJoin(command.words, " "); }

// The flag as a command line spells it: a value flag with a value.
std::string Spelled(const FlagSpec& flag) {
  return "--" + flag.name + (flag.value.empty() ? "" : "=x");
}

// Help and parser read one list: each command's --help lists every flag it
// takes, with what it is for, and the command takes exactly those flags.
// Every run below also has three positional arguments, which each command
// refuses after reading its flags, so that nothing is started.
TEST(CliTest, EachCommandsHelpListsExactlyTheFlagsItTakes) {
  const std::vector<Command> commands = AllCommands();
  std::map<std::string, FlagSpec> every_flag;
  for (const Command& command : commands) {
    for (const FlagSpec& flag : command.flags) every_flag.emplace(flag.name, flag);
  }
  ASSERT_GT(every_flag.size(), 20u);
  for (const Command& command : commands) {
    const std::string words = Words(command);
    std::vector<std::string> help_args = command.words;
    help_args.push_back("--help");
    Result help = RunKubetrain(help_args);
    EXPECT_EQ(help.code, 0) << words;
    EXPECT_EQ(help.out.find("Flags:") != std::string::npos, !command.flags.empty()) << words;
    std::set<std::string> taken;
    for (const FlagSpec& flag : command.flags) {
      taken.insert(flag.name);
      EXPECT_FALSE(flag.help.empty()) << words << " --" << flag.name;
      const std::string names = "--" + flag.name + (flag.value.empty() ? "" : " " + flag.value);
      EXPECT_THAT(help.out, ::testing::HasSubstr(names)) << words;
      EXPECT_THAT(help.out, ::testing::HasSubstr(flag.help + "\n")) << words;
      std::vector<std::string> args = command.words;
      args.push_back(Spelled(flag));
      args.insert(args.end(), {"a", "b", "c"});
      Result r = RunKubetrain(args);
      EXPECT_EQ(r.code, 2) << words << " " << args[command.words.size()] << ": " << r.err;
      EXPECT_THAT(r.err, ::testing::Not(::testing::HasSubstr("unknown flag"))) << words;
    }
    if (command.words == std::vector<std::string>{"version"}) continue;  // takes no arguments
    for (const auto& [name, flag] : every_flag) {
      if (taken.count(name) > 0) continue;
      std::vector<std::string> args = command.words;
      args.push_back(Spelled(flag));
      args.insert(args.end(), {"a", "b", "c"});
      Result r = RunKubetrain(args);
      EXPECT_EQ(r.code, 2) << words << " --" << name;
      EXPECT_THAT(r.err, ::testing::HasSubstr("unknown flag --" + name)) << words;
    }
  }
  // The short form stands before the long one; a switch has no value.
  Result r = RunKubetrain({"jobs", "cancel", "--help"});
  EXPECT_THAT(r.out, ::testing::HasSubstr("\n  -n, --namespace NS "));
  EXPECT_THAT(r.out, ::testing::HasSubstr("\n      --wait "));
  r = RunKubetrain({"local", "train", "--help"});
  EXPECT_THAT(r.out, ::testing::HasSubstr("--worker-count N "));
  EXPECT_THAT(r.out, ::testing::HasSubstr("(default 2)"));
}

// --local=false is the cluster's backend, as no --local is: here the
// namespace is not refused as the local backend's, and the kubeconfig the
// command was given is the one it could not read.
TEST(JobsFlagsTest, LocalFalseMeansTheCluster) {
  unsetenv("KUBETRAIN_BACKEND");
  const std::string kubeconfig = ::testing::TempDir() + "/no-such-kubeconfig";
  Result r = RunKubetrain(
      {"jobs", "describe", "some_job", "--local=false", "-n", "ml", "--kubeconfig", kubeconfig});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("no-such-kubeconfig"));
  EXPECT_THAT(r.err, ::testing::Not(::testing::HasSubstr("names a Kubernetes namespace")));
  r = RunKubetrain({"jobs", "describe", "some_job", "--local=true", "-n", "ml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("names a Kubernetes namespace"));

  // The flag, when given, overrides KUBETRAIN_BACKEND=local; without it the
  // environment picks the local backend.
  setenv("KUBETRAIN_BACKEND", "local", 1);
  r = RunKubetrain(
      {"jobs", "describe", "some_job", "--local=false", "-n", "ml", "--kubeconfig", kubeconfig});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("no-such-kubeconfig"));
  r = RunKubetrain({"jobs", "describe", "some_job", "-n", "ml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("names a Kubernetes namespace"));
  unsetenv("KUBETRAIN_BACKEND");
}

TEST(RenderCommandTest, UsesTheManifestsNamespaceAsKubectlApplyDoes) {
  const std::string path = ::testing::TempDir() + "/namespaced.yaml";
  std::ofstream(path) << "apiVersion: kubetrain.io/v1\nkind: TrainingJob\n"
                         "metadata: {name: mnist, namespace: ml-team}\n"
                         "spec: {trainingInput: {scaleTier: BASIC}}\n";
  Result r = RunKubetrain({"render", path});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("namespace: ml-team\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("mnist-master-0.ml-team.svc"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("default")));
  // The same namespace again is fine; another is refused, naming both.
  r = RunKubetrain({"render", path, "--namespace", "ml-team"});
  EXPECT_EQ(r.code, 0) << r.err;
  r = RunKubetrain({"render", path, "--namespace=other"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, ::testing::HasSubstr("metadata.namespace \"ml-team\""));
  EXPECT_THAT(r.err, ::testing::HasSubstr("--namespace \"other\""));

  // Without one in the manifest: --namespace, else default.
  const std::string plain = ::testing::TempDir() + "/plain.yaml";
  std::ofstream(plain) << "apiVersion: kubetrain.io/v1\nkind: TrainingJob\n"
                          "metadata: {name: mnist}\nspec: {trainingInput: {scaleTier: BASIC}}\n";
  r = RunKubetrain({"render", plain, "--namespace", "other"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("namespace: other\n"));
  r = RunKubetrain({"render", plain});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("namespace: default\n"));
}

// A Cloud ML config gets its name where it is submitted (jobs submit
// training JOB); render takes it as --name.
TEST(RenderCommandTest, ACloudMlConfigIsRenderedUnderTheNameItIsGiven) {
  Result r = RunKubetrain({"render", kExamples + "cloudml-config.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, ::testing::HasSubstr("cloudml-config.yaml: a Cloud ML config has no job name "
                                          "(jobs submit training JOB gives it one): name it with "
                                          "--name JOB"));
  r = RunKubetrain({"render", kExamples + "cloudml-config.yaml", "--name", "census_1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("name: census-1-t1-master-0\n"));
  r = RunKubetrain({"render", kExamples + "cloudml-config.yaml", "--name", "9lives"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("--name \"9lives\": must start with a letter"));
  r = RunKubetrain({"render", kExamples + "basic.yaml", "--name", "other"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("--name is for a Cloud ML config; this file names its "
                                          "job itself"));
}

TEST(CliTest, CommandGroupsListTheirCommands) {
  Result r = RunKubetrain({"jobs", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith("Usage: kubetrain jobs COMMAND [FLAGS] [ARGS]\n"));
  for (const char* command :
       {"jobs submit training", "jobs describe", "jobs list", "jobs cancel", "jobs stream-logs"}) {
    EXPECT_THAT(r.out, ::testing::HasSubstr(std::string("\n  ") + command)) << command;
  }
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("validate")));
  EXPECT_EQ(r.err, "");

  r = RunKubetrain({"jobs", "submit", "-h"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith("Usage: kubetrain jobs submit COMMAND"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("jobs submit training"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("jobs describe")));

  r = RunKubetrain({"local", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("local train"));

  // The group alone, or a command it does not have: a usage error that lists
  // the group's commands.
  r = RunKubetrain({"jobs"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::StartsWith("kubetrain jobs: name a command\n"));
  EXPECT_THAT(r.err, ::testing::HasSubstr("jobs describe"));
  r = RunKubetrain({"jobs", "frobnicate"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::StartsWith("kubetrain jobs: unknown command \"frobnicate\"\n"));
  EXPECT_EQ(r.out, "");
}

TEST(CliTest, VersionNamesTheApi) {
  Result r = RunKubetrain({"version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, ::testing::MatchesRegex("kubetrain [0-9.]+ \\(API kubetrain.io/v1\\)\n"));
}

}  // namespace
}  // namespace kubetrain::cli
