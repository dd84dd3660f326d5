#include "api/crd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/job_file.h"

namespace kubetrain::api {
namespace {

using ::testing::HasSubstr;

TEST(CrdTest, CheckedInCrdMatchesTheSchema) {
  const std::string path =
      std::string(KUBETRAIN_SOURCE_DIR) + "/deploy/crds/kubetrain.io_trainingjobs.yaml";
  absl::StatusOr<std::string> checked_in = ReadTextFile(path);
  ASSERT_TRUE(checked_in.ok()) << checked_in.status();
  EXPECT_EQ(*checked_in, TrainingJobCrdYaml())
      << path << " is stale: run `cmake --build build --target crds` and commit it";
}

TEST(CrdTest, SchemaIsStructural) {
  const nlohmann::json spec = SchemaOf("kubetrain.v1.TrainingInput");
  EXPECT_EQ(spec["properties"]["scaleTier"]["type"], "string");
  EXPECT_EQ(spec["properties"]["args"]["items"]["type"], "string");
  const nlohmann::json job_spec = SchemaOf("kubetrain.v1.TrainingJobSpec");
  EXPECT_EQ(job_spec["properties"]["template"]["x-kubernetes-preserve-unknown-fields"], true);
  EXPECT_EQ(job_spec["properties"]["replicaTemplates"]["additionalProperties"]["type"], "object");
  const nlohmann::json crd = TrainingJobCrd();
  EXPECT_EQ(crd["spec"]["names"]["shortNames"][0], "tj");
  EXPECT_TRUE(crd["spec"]["versions"][0]["subresources"].contains("status"));
  EXPECT_TRUE(SchemaOf("kubetrain.v1.NoSuchMessage").is_null());
  // The API server accepts nothing but the type at the root's metadata, not
  // even a description.
  EXPECT_EQ(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"],
            nlohmann::json({{"type", "object"}}));
}

// The schema node `kubectl explain trainingjob.<path>` describes: through
// properties, and into the items of arrays and the values of maps.
const nlohmann::json* At(const nlohmann::json& root, const std::string& path) {
  const nlohmann::json* node = &root;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    while (node->contains("items") || node->contains("additionalProperties")) {
      node = node->contains("items") ? &(*node)["items"] : &(*node)["additionalProperties"];
    }
    if (!node->contains("properties") || !(*node)["properties"].contains(std::string(part))) {
      return nullptr;
    }
    node = &(*node)["properties"][std::string(part)];
  }
  return node;
}

nlohmann::json OpenApi() {
  return TrainingJobCrd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
}

// Every property under `node` (at `path`) without a description, and every
// enum value its field's description leaves unexplained ("path=VALUE").
void CollectUndescribed(const nlohmann::json& node, const std::string& path,
                        std::vector<std::string>* missing) {
  if (node.contains("items")) CollectUndescribed(node["items"], path, missing);
  if (node.contains("additionalProperties") && node["additionalProperties"].is_object()) {
    CollectUndescribed(node["additionalProperties"], path, missing);
  }
  if (!node.contains("properties")) return;
  for (const auto& [name, child] : node["properties"].items()) {
    const std::string child_path = path + "." + name;
    const std::string description = child.value("description", std::string());
    if (description.empty()) missing->push_back(child_path);
    for (const nlohmann::json& value : child.value("enum", nlohmann::json::array())) {
      // "- NAME: what it means", one line per value.
      if (!absl::StrContains("\n" + description, "\n- " + value.get<std::string>() + ": ")) {
        missing->push_back(child_path + "=" + value.get<std::string>());
      }
    }
    CollectUndescribed(child, child_path, missing);
  }
}

TEST(CrdTest, EveryFieldUnderSpecAndStatusHasADescription) {
  const nlohmann::json schema = OpenApi();
  std::vector<std::string> missing;
  for (const char* top : {"spec", "status"}) {
    ASSERT_TRUE(schema["properties"].contains(top));
    if (schema["properties"][top].value("description", std::string()).empty()) {
      missing.push_back(top);
    }
    CollectUndescribed(schema["properties"][top], top, &missing);
  }
  EXPECT_TRUE(missing.empty())
      << missing.size() << " fields of the CRD have no description; write a comment above each "
      << "in proto/kubetrain/v1/training_job.proto (enum values too), then regenerate the CRD:\n  "
      << absl::StrJoin(missing, "\n  ");
}

// The check above has teeth: a schema with an undescribed field or enum value
// is reported by path.
TEST(CrdTest, UndescribedFieldsAreNamedByPath) {
  nlohmann::json schema = OpenApi();
  schema["properties"]["spec"]["properties"]["runPolicy"]["properties"]["suspend"].erase(
      "description");
  nlohmann::json& restart =
      schema["properties"]["spec"]["properties"]["runPolicy"]["properties"]["restartPolicy"];
  std::string text = restart["description"];
  text.replace(text.find("\n- Never: "), 10, "\n- Never");
  restart["description"] = text;
  std::vector<std::string> missing;
  CollectUndescribed(schema["properties"]["spec"], "spec", &missing);
  EXPECT_THAT(missing, ::testing::UnorderedElementsAre("spec.runPolicy.suspend",
                                                       "spec.runPolicy.restartPolicy=Never"));
}

std::string DescriptionAt(const std::string& path) {
  static const nlohmann::json schema = OpenApi();
  const nlohmann::json* node = At(schema, path);
  EXPECT_NE(node, nullptr) << path;
  return node == nullptr ? "" : node->value("description", std::string());
}

// What `kubectl explain trainingjob.<path>` would print, for a sample of paths.
TEST(CrdTest, ExplainShowsTheProtoCommentsWithEnumValues) {
  const std::string tier = DescriptionAt("spec.trainingInput.scaleTier");
  EXPECT_TRUE(absl::StartsWith(tier, "The cluster shape. Default BASIC.")) << tier;
  EXPECT_THAT(tier, HasSubstr("\n- BASIC: One master (standard: 4 CPUs, 15 GiB), no workers"));
  EXPECT_THAT(tier, HasSubstr("\n- STANDARD_1: One master, 4 workers and 3 parameter servers"));
  EXPECT_THAT(tier, HasSubstr("\n- PREMIUM_1: One master and 19 workers (complex_model_l) and 11 "
                              "parameter servers (large_model)."));
  EXPECT_THAT(tier, HasSubstr("\n- BASIC_TPU: Cloud ML's TPU tier: accepted by the schema, "
                              "rejected by validation"));

  const std::string scale = DescriptionAt("spec.trainingInput.hyperparameters.params.scaleType");
  EXPECT_TRUE(absl::StartsWith(scale, "How numeric values are spread over the range.")) << scale;
  EXPECT_THAT(scale, HasSubstr("\n- UNIT_LOG_SCALE: Evenly over the logarithm of the values"));
  EXPECT_THAT(scale, HasSubstr("\n- NONE: Not set: linear."));
  // The array of parameters is described too, and so is its element type.
  EXPECT_THAT(DescriptionAt("spec.trainingInput.hyperparameters.params"),
              HasSubstr("The parameters to tune"));

  const std::string restart = DescriptionAt("spec.runPolicy.restartPolicy");
  EXPECT_TRUE(absl::StartsWith(restart, "What happens when a replica fails. Default Never."));
  EXPECT_THAT(restart, HasSubstr("\n- ExitCode: Exit codes >= 128"));
  EXPECT_THAT(restart, HasSubstr("exit codes 1-127 are permanent"));

  const std::string objective =
      DescriptionAt("status.trainingOutput.trials.finalMetric.objectiveValue");
  EXPECT_EQ(objective, "The objective's value: the metric tag's reported value.");
  EXPECT_THAT(DescriptionAt("status.trainingOutput.trials.finalMetric"),
              HasSubstr("its last report of the metric tag"));

  // Paragraph lines are joined; the Cloud ML name is given where it differs.
  const std::string workers = DescriptionAt("spec.trainingInput.workerCount");
  EXPECT_EQ(workers.find('\n'), std::string::npos) << workers;
  EXPECT_THAT(workers, HasSubstr("Cloud ML's API printed it as a string"));
}

// int64 fields take a number or a string of digits: Cloud ML's API printed
// them as strings ("workerCount: '2'"), and configs copied from it must pass
// the API server's schema check. int-or-string is the one structural type that
// takes both; the pattern keeps the strings to digits, and the description
// says so.
TEST(CrdTest, Int64FieldsTakeNumbersAndStringsOfDigits) {
  const nlohmann::json schema = OpenApi();
  for (const char* path :
       {"spec.trainingInput.workerCount", "spec.trainingInput.parameterServerCount",
        "spec.trainingInput.evaluatorCount",
        "spec.trainingInput.masterConfig.acceleratorConfig.count",
        "spec.runPolicy.activeDeadlineSeconds", "status.trainingOutput.completedTrialCount",
        "status.trainingOutput.totalTrialCount",
        "status.trainingOutput.trials.finalMetric.trainingStep"}) {
    const nlohmann::json* node = At(schema, path);
    ASSERT_NE(node, nullptr) << path;
    EXPECT_FALSE(node->contains("type")) << path;
    EXPECT_EQ((*node)["x-kubernetes-int-or-string"], true) << path;
    EXPECT_EQ((*node)["anyOf"], nlohmann::json::parse(R"([{"type":"integer"},{"type":"string"}])"))
        << path;
    EXPECT_EQ((*node)["pattern"], "^-?[0-9]+$") << path;
    EXPECT_THAT(node->value("description", ""),
                ::testing::EndsWith("Takes a number or a string of digits (\"2\")."))
        << path;
  }
  EXPECT_EQ(At(schema, "status.bestObjectiveValue")->value("type", ""), "number");
  EXPECT_EQ(At(schema, "spec.trainingInput.hyperparameters.maxTrials")->value("type", ""),
            "integer");
}

TEST(CrdTest, PrinterColumnsAndCategory) {
  const nlohmann::json crd = TrainingJobCrd();
  EXPECT_EQ(crd["spec"]["names"]["categories"], nlohmann::json::array({"kubetrain"}));
  const nlohmann::json& columns = crd["spec"]["versions"][0]["additionalPrinterColumns"];
  ASSERT_EQ(columns.size(), 5u);
  std::vector<std::string> summary;
  for (const nlohmann::json& c : columns) {
    summary.push_back(absl::StrCat(c["name"].get<std::string>(), " ", c["type"].get<std::string>(),
                                   " ", c["jsonPath"].get<std::string>(), " ",
                                   c.value("priority", 0)));
    EXPECT_FALSE(c.value("description", std::string()).empty()) << c.dump();
  }
  // A column's description is its field's first sentence.
  EXPECT_EQ(columns[0]["description"],
            "The job's state: QUEUED, PREPARING, RUNNING, then SUCCEEDED or FAILED; or CANCELLING, "
            "then CANCELLED.");
  EXPECT_THAT(summary, ::testing::ElementsAre("State string .status.state 0",
                                              "Queue integer .status.queuePosition 0",
                                              "Trials string .status.trialProgress 0",
                                              "Best number .status.bestObjectiveValue 1",
                                              "Age date .metadata.creationTimestamp 0"));
  // Every column's path exists in the schema.
  const nlohmann::json schema = OpenApi();
  EXPECT_NE(At(schema, "status.trialProgress"), nullptr);
  EXPECT_NE(At(schema, "status.queuePosition"), nullptr);
  EXPECT_NE(At(schema, "status.bestObjectiveValue"), nullptr);
}

}  // namespace
}  // namespace kubetrain::api
