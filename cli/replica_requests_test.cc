#include "cli/replica_requests.h"

#include <sstream>

#include "cli/cli.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::cli {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

json Pod(const std::string& name, json resources) {
  return {{"kind", "Pod"},
          {"metadata", {{"name", name}}},
          {"spec", {{"containers", {{{"name", "kubetrain"}, {"resources", resources}}}}}}};
}

TEST(ReplicaRequestsTest, EachPodAndWhatTheLargestNeedsOfANode) {
  std::vector<json> objects = {
      {{"kind", "Service"}, {"metadata", {{"name", "j-master-0"}}}},
      Pod("j-master-0", {{"requests", {{"cpu", "4"}, {"memory", "15360Mi"}}},
                         {"limits", {{"memory", "15360Mi"}}}}),
      Pod("j-worker-0", {{"requests", {{"cpu", "500m"}, {"memory", "1Gi"}}},
                         {"limits", {{"nvidia.com/gpu", "2"}}}}),
  };
  EXPECT_EQ(ReplicaRequestsComment(objects),
            "# What each pod requests; it is scheduled only on a node with that much allocatable "
            "left:\n"
            "#   j-master-0  cpu 4, memory 15360Mi\n"
            "#   j-worker-0  cpu 500m, memory 1Gi, nvidia.com/gpu 2\n"
            "# The largest pod needs a node with cpu 4, memory 15360Mi, nvidia.com/gpu 2 "
            "allocatable; all 2 pods request cpu 4500m, memory 16384Mi, nvidia.com/gpu 2.\n");
  // A quantity it cannot read is shown, not summed.
  objects[2]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots";
  EXPECT_THAT(ReplicaRequestsComment(objects), HasSubstr("#   j-worker-0  cpu lots,"));
  EXPECT_THAT(ReplicaRequestsComment(objects), HasSubstr("needs a node with memory 15360Mi,"));
  EXPECT_EQ(ReplicaRequestsComment({}), "");
}

TEST(ReplicaRequestsTest, RenderPrintsThemBeforeTheObjects) {
  std::ostringstream out, err;
  ASSERT_EQ(
      RunCli({"render", std::string(KUBETRAIN_SOURCE_DIR) + "/examples/basic.yaml"}, out, err), 0)
      << err.str();
  // BASIC: one master on a "standard" machine (docs/scale-tiers.md).
  EXPECT_THAT(out.str(), StartsWith("# What each pod requests;"));
  EXPECT_THAT(out.str(), HasSubstr("#   fmnist-basic-master-0  cpu 4, memory 15360Mi\n"
                                   "# The largest pod needs a node with cpu 4, memory 15360Mi "
                                   "allocatable; all 1 pod requests cpu 4, memory 15360Mi.\n"));
}

}  // namespace
}  // namespace kubetrain::cli
