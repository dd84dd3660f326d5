#include "api/crd.h"

#include <gtest/gtest.h>

#include "api/job_file.h"

namespace kubetrain::api {
namespace {

TEST(CrdTest, CheckedInCrdMatchesTheSchema) {
  const std::string path = std::string(KUBETRAIN_SOURCE_DIR) + "/deploy/crds/kubetrain.io_trainingjobs.yaml";
  absl::StatusOr<std::string> checked_in = ReadTextFile(path);
  ASSERT_TRUE(checked_in.ok()) << checked_in.status();
  EXPECT_EQ(*checked_in, TrainingJobCrdYaml())
      << path << " is stale: run `cmake --build build --target crds` and commit it";
}

TEST(CrdTest, SchemaIsStructural) {
  const nlohmann::json spec = SchemaOf("kubetrain.v1.TrainingInput");
  EXPECT_EQ(spec["properties"]["workerCount"]["x-kubernetes-int-or-string"], true);
  EXPECT_EQ(spec["properties"]["scaleTier"]["type"], "string");
  EXPECT_EQ(spec["properties"]["args"]["items"]["type"], "string");
  const nlohmann::json job_spec = SchemaOf("kubetrain.v1.TrainingJobSpec");
  EXPECT_EQ(job_spec["properties"]["template"]["x-kubernetes-preserve-unknown-fields"], true);
  EXPECT_EQ(job_spec["properties"]["replicaTemplates"]["additionalProperties"]["type"], "object");
  const nlohmann::json crd = TrainingJobCrd();
  EXPECT_EQ(crd["spec"]["names"]["shortNames"][0], "tj");
  EXPECT_TRUE(crd["spec"]["versions"][0]["subresources"].contains("status"));
}

}  // namespace
}  // namespace kubetrain::api
