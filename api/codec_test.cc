#include "api/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "api/defaults.h"
#include "api/job_file.h"
#include "api/scale_tiers.h"
#include "google/protobuf/util/message_differencer.h"

namespace kubetrain::api {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Examples() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(KUBETRAIN_SOURCE_DIR) / "examples")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(CodecTest, EveryExampleIsValid) {
  const auto files = Examples();
  ASSERT_GE(files.size(), 6u);
  for (const fs::path& file : files) {
    absl::StatusOr<std::string> text = ReadTextFile(file.string());
    ASSERT_TRUE(text.ok()) << text.status();
    CheckedJob checked = CheckTrainingJob(*text);
    EXPECT_TRUE(checked.ok()) << file << "\n" << FormatErrors(checked.errors);
  }
}

// YAML -> proto -> JSON -> proto is lossless.
TEST(CodecTest, SplitYamlDocumentsKeepsEachAsWrittenWithItsFirstLine) {
  const std::string text =
      "# header\n"          // 1
      "a: 1\n"              // 2
      "---\n"               // 3
      "b: 2\n"              // 4
      "...\n"               // 5
      "# only a comment\n"  // 6
      "--- {c: 3}\n"        // 7: content on the marker's line
      "----: not a marker\n"
      "---   # a comment\r\n"
      "d: |\n"
      "  text\n";
  const std::vector<YamlDocumentText> documents = SplitYamlDocuments(text);
  ASSERT_EQ(documents.size(), 5u);
  EXPECT_EQ(documents[0].text, "# header\na: 1\n");
  EXPECT_EQ(documents[0].first_line, 1);
  EXPECT_FALSE(documents[0].empty);
  EXPECT_EQ(documents[1].text, "b: 2\n");
  EXPECT_EQ(documents[1].first_line, 4);
  EXPECT_EQ(documents[2].text, "# only a comment\n");
  EXPECT_EQ(documents[2].first_line, 6);
  EXPECT_TRUE(documents[2].empty);
  EXPECT_EQ(documents[3].text, "--- {c: 3}\n----: not a marker\n");
  EXPECT_EQ(documents[3].first_line, 7);
  EXPECT_FALSE(documents[3].empty);
  EXPECT_EQ(documents[4].text, "d: |\n  text\n");
  EXPECT_EQ(documents[4].first_line, 10);
  // One document, with or without its marker.
  ASSERT_EQ(SplitYamlDocuments("a: 1\n").size(), 1u);
  ASSERT_EQ(SplitYamlDocuments("---\na: 1").size(), 1u);
  EXPECT_EQ(SplitYamlDocuments("---\na: 1")[0].text, "a: 1");
  EXPECT_TRUE(SplitYamlDocuments("").empty());
}

TEST(CodecTest, RoundTripThroughJsonIsLossless) {
  for (const fs::path& file : Examples()) {
    DecodeResult first = DecodeTrainingJob(*ReadTextFile(file.string()));
    ASSERT_TRUE(first.ok()) << file;
    ApplyDefaults(&first.job);  // exercise every defaulted field too
    const std::string json = EncodeJson(first.job);
    DecodeResult second = DecodeTrainingJob(json);
    ASSERT_TRUE(second.ok()) << file << ": " << FormatErrors(second.errors) << json;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(first.job, second.job))
        << file << "\n"
        << json << "\n"
        << EncodeJson(second.job);
    // And the YAML we print reads back to the same message.
    DecodeResult third = DecodeTrainingJob(EncodeYaml(first.job));
    ASSERT_TRUE(third.ok()) << FormatErrors(third.errors) << EncodeYaml(first.job);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(first.job, third.job)) << file;
  }
}

TEST(CodecTest, CloudMlConfigIsABareTrainingInput) {
  DecodeResult result = DecodeTrainingJob(
      *ReadTextFile(std::string(KUBETRAIN_SOURCE_DIR) + "/examples/cloudml-config.yaml"));
  ASSERT_TRUE(result.ok()) << FormatErrors(result.errors);
  EXPECT_TRUE(result.bare_config);
  const auto& input = result.job.spec().training_input();
  EXPECT_EQ(input.scale_tier(), v1::TrainingInput::STANDARD_1);
  const auto& hp = input.hyperparameters();
  EXPECT_EQ(hp.goal(), v1::HyperparameterSpec::MAXIMIZE);
  EXPECT_EQ(hp.max_trials(), 10);
  EXPECT_EQ(hp.max_parallel_trials(), 2);
  ASSERT_EQ(hp.params_size(), 2);
  EXPECT_EQ(hp.params(0).parameter_name(), "hidden1");
  EXPECT_EQ(hp.params(0).type(), v1::ParameterSpec::INTEGER);
  EXPECT_EQ(hp.params(0).min_value(), 40);
  EXPECT_EQ(hp.params(0).max_value(), 400);
  EXPECT_EQ(hp.params(1).scale_type(), v1::ParameterSpec::UNIT_LOG_SCALE);
  EXPECT_DOUBLE_EQ(hp.params(1).min_value(), 0.0001);
}

TEST(CodecTest, JsonIsAcceptedAndInt64PrintsAsString) {
  DecodeResult result = DecodeTrainingJob(
      R"({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "standard",
          "workerType": "standard", "workerCount": "9", "parameterServerCount": 3}})");
  ASSERT_TRUE(result.ok()) << FormatErrors(result.errors);
  EXPECT_EQ(result.job.spec().training_input().worker_count(), 9);
  EXPECT_EQ(result.job.spec().training_input().parameter_server_count(), 3);
  EXPECT_THAT(EncodeJson(result.job), ::testing::HasSubstr(R"("workerCount":"9")"));
}

// What the API server gets: int64 fields as numbers (the CRD says integer),
// everywhere they occur: singular, in repeated messages, in map values.
TEST(CodecTest, KubernetesJsonHasInt64AsNumbers) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("j");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_worker_count(9);
  input->mutable_master_config()->mutable_accelerator_config()->set_count(2);
  job.mutable_spec()->mutable_run_policy()->set_active_deadline_seconds(3600);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(2);
  v1::TrainingOutput* output = job.mutable_status()->mutable_training_output();
  output->set_completed_trial_count(3);
  v1::HyperparameterOutput* trial = output->add_trials();
  trial->set_trial_id("12");
  (*trial->mutable_hyperparameters())["lr"] = "0.5";
  trial->mutable_final_metric()->set_training_step(785);
  trial->mutable_final_metric()->set_objective_value(0.875);
  trial->add_all_metrics()->set_training_step(9007199254740993);  // beyond a double's integers
  job.mutable_status()->set_best_objective_value(0.875);

  const nlohmann::json k8s = EncodeKubernetesJson(job);
  EXPECT_EQ(k8s["spec"]["trainingInput"]["workerCount"], 9);
  EXPECT_TRUE(k8s["spec"]["trainingInput"]["workerCount"].is_number_integer());
  EXPECT_EQ(k8s["spec"]["trainingInput"]["masterConfig"]["acceleratorConfig"]["count"], 2);
  EXPECT_EQ(k8s["spec"]["runPolicy"]["activeDeadlineSeconds"], 3600);
  EXPECT_EQ(k8s["spec"]["runPolicy"]["backoffLimit"], 2);
  EXPECT_EQ(k8s["status"]["trainingOutput"]["completedTrialCount"], 3);
  EXPECT_EQ(k8s["status"]["trainingOutput"]["trials"][0]["finalMetric"]["trainingStep"], 785);
  EXPECT_EQ(
      k8s["status"]["trainingOutput"]["trials"][0]["allMetrics"][0]["trainingStep"].get<int64_t>(),
      9007199254740993);
  // Strings that are strings stay strings.
  EXPECT_EQ(k8s["status"]["trainingOutput"]["trials"][0]["trialId"], "12");
  EXPECT_EQ(k8s["status"]["trainingOutput"]["trials"][0]["hyperparameters"]["lr"], "0.5");
  EXPECT_EQ(k8s["status"]["bestObjectiveValue"], 0.875);
  // And it reads back to the same message.
  DecodeResult back = DecodeTrainingJob(k8s.dump());
  ASSERT_TRUE(back.ok()) << FormatErrors(back.errors);
  EXPECT_EQ(back.job.spec().DebugString(), job.spec().DebugString());
  // What kubetrain prints keeps Cloud ML's strings.
  EXPECT_THAT(EncodeJson(job), ::testing::HasSubstr(R"("workerCount":"9")"));
}

TEST(CodecTest, ErrorsCarryLineAndColumn) {
  DecodeResult result = DecodeTrainingJob("trainingInput:\n  scaleTier: BASIC\n  workerCont: 3\n");
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].line, 3);
  EXPECT_EQ(result.errors[0].column, 3);
  EXPECT_EQ(FormatErrors(result.errors, "config.yaml"),
            "config.yaml:3:3: trainingInput.workerCont: unknown field \"workerCont\"; did you mean "
            "\"workerCount\"?\n");
}

TEST(CodecTest, YamlOutputSortsKeysAndQuotesAmbiguousStrings) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("job1");
  auto* input = job.mutable_spec()->mutable_training_input();
  input->set_worker_count(4);
  input->set_region("us-central1");
  input->add_args("--lr=0.1");
  input->add_args("true");
  // Base-60 numbers in YAML 1.1 (PyYAML reads 1:4 as 64); times are text.
  input->add_args("1:4");
  input->add_args("-1:30.5");
  input->add_args("a:1");
  input->add_args("12:");
  input->set_job_dir("");
  EXPECT_EQ(EncodeYaml(job),
            "metadata:\n"
            "  name: job1\n"
            "spec:\n"
            "  trainingInput:\n"
            "    args:\n"
            "    - --lr=0.1\n"
            "    - 'true'\n"
            "    - '1:4'\n"
            "    - '-1:30.5'\n"
            "    - a:1\n"
            "    - '12:'\n"
            "    region: us-central1\n"
            "    workerCount: '4'\n");
}

TEST(CodecTest, ListsOfMappingsPrintInGcloudStyle) {
  v1::HyperparameterSpec spec;
  auto* p = spec.add_params();
  p->set_parameter_name("lr");
  p->set_type(v1::ParameterSpec::DOUBLE);
  p->set_min_value(0.5);
  EXPECT_EQ(EncodeYaml(spec),
            "params:\n"
            "- minValue: 0.5\n"
            "  parameterName: lr\n"
            "  type: DOUBLE\n");
}

TEST(CodecTest, TemplatesKeepTheirYamlTypes) {
  DecodeResult result = DecodeTrainingJob(
      "kind: TrainingJob\nmetadata: {name: a}\nspec:\n  template:\n    spec:\n"
      "      nodeSelector: {pool: 'gpu'}\n      priority: 3\n      hostNetwork: false\n");
  ASSERT_TRUE(result.ok()) << FormatErrors(result.errors);
  EXPECT_EQ(nlohmann::json::parse(EncodeJson(result.job.spec().template_())),
            nlohmann::json::parse(
                R"({"spec":{"hostNetwork":false,"nodeSelector":{"pool":"gpu"},"priority":3}})"));
}

TEST(DefaultsTest, FillsCloudMlDefaults) {
  DecodeResult result = DecodeTrainingJob(
      "trainingInput:\n  hyperparameters:\n    params:\n      - {parameterName: x, type: DOUBLE,"
      " minValue: 0, maxValue: 1}\n");
  ASSERT_TRUE(result.ok());
  ApplyDefaults(&result.job);
  const auto& input = result.job.spec().training_input();
  EXPECT_EQ(input.scale_tier(), v1::TrainingInput::BASIC);
  EXPECT_EQ(input.hyperparameters().goal(), v1::HyperparameterSpec::MAXIMIZE);
  EXPECT_EQ(input.hyperparameters().max_trials(), 1);
  EXPECT_EQ(input.hyperparameters().max_parallel_trials(), 1);
  EXPECT_EQ(input.hyperparameters().hyperparameter_metric_tag(), "training/hptuning/metric");
  EXPECT_EQ(input.scheduling().max_running_time().seconds(), 7 * 24 * 3600);
  EXPECT_EQ(result.job.spec().run_policy().restart_policy(), v1::RunPolicy::Never);
  EXPECT_EQ(result.job.spec().run_policy().backoff_limit(), 3);
  EXPECT_EQ(result.job.spec().run_policy().clean_pod_policy(), v1::RunPolicy::Running);
  EXPECT_EQ(result.job.spec().port(), 2222);
  v1::TrainingJob twice = result.job;
  ApplyDefaults(&twice);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(result.job, twice));
}

TEST(DefaultsTest, MaxFailedTrialsRule) {
  v1::HyperparameterSpec spec;
  spec.set_max_trials(1);
  EXPECT_EQ(EffectiveMaxFailedTrials(spec), 1);
  spec.set_max_trials(10);
  EXPECT_EQ(EffectiveMaxFailedTrials(spec), 3);
  spec.set_max_trials(100);
  EXPECT_EQ(EffectiveMaxFailedTrials(spec), 25);
  spec.set_max_failed_trials(7);
  EXPECT_EQ(EffectiveMaxFailedTrials(spec), 7);
}

struct TierCase {
  v1::TrainingInput::ScaleTier tier;
  std::vector<std::pair<Role, int64_t>> groups;
  int64_t master_gpus;
};

TEST(ScaleTiersTest, TiersMapToClusters) {
  const TierCase cases[] = {
      {v1::TrainingInput::BASIC, {{Role::kMaster, 1}}, 0},
      {v1::TrainingInput::BASIC_GPU, {{Role::kMaster, 1}}, 1},
      {v1::TrainingInput::STANDARD_1,
       {{Role::kMaster, 1}, {Role::kWorker, 4}, {Role::kParameterServer, 3}},
       0},
      {v1::TrainingInput::PREMIUM_1,
       {{Role::kMaster, 1}, {Role::kWorker, 19}, {Role::kParameterServer, 11}},
       0},
  };
  for (const TierCase& c : cases) {
    v1::TrainingJob job;
    job.mutable_spec()->mutable_training_input()->set_scale_tier(c.tier);
    ApplyDefaults(&job);
    const auto groups = ReplicaGroups(job.spec().training_input());
    std::vector<std::pair<Role, int64_t>> got;
    for (const auto& g : groups) got.emplace_back(g.role, g.count);
    EXPECT_EQ(got, c.groups) << v1::TrainingInput::ScaleTier_Name(c.tier);
    EXPECT_EQ(groups[0].resources.gpus, c.master_gpus);
  }
}

TEST(ScaleTiersTest, CustomUsesTypesCountsAndAccelerators) {
  CheckedJob checked = CheckTrainingJob(
      *ReadTextFile(std::string(KUBETRAIN_SOURCE_DIR) + "/examples/custom-gpu.yaml"));
  ASSERT_TRUE(checked.ok());
  const auto groups = ReplicaGroups(checked.job.spec().training_input());
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1].role, Role::kWorker);
  EXPECT_EQ(groups[1].count, 2);
  EXPECT_EQ(groups[1].resources.machine_type, "standard_gpu");
  EXPECT_EQ(groups[1].resources.gpus, 1);
  EXPECT_EQ(groups[1].resources.cpu, 8);
}

TEST(ScaleTiersTest, TheLargestComputeEngineTypesHaveTheirSizes) {
  struct Case {
    const char* type;
    double cpu;
    int64_t memory_mib;
  };
  const Case cases[] = {{"n1-standard-64", 64, 240 * 1024}, {"n1-standard-96", 96, 360 * 1024},
                        {"n1-highmem-64", 64, 416 * 1024},  {"n1-highmem-96", 96, 624 * 1024},
                        {"n1-highcpu-64", 64, 58982},       {"n1-highcpu-96", 96, 88474}};
  for (const Case& c : cases) {
    const std::optional<MachineResources> found = LookupMachineType(c.type);
    ASSERT_TRUE(found.has_value()) << c.type;
    EXPECT_EQ(found->cpu, c.cpu) << c.type;
    EXPECT_EQ(found->memory_mib, c.memory_mib) << c.type;
    EXPECT_EQ(found->gpus, 0) << c.type;
  }
}

}  // namespace
}  // namespace kubetrain::api
