#include "operator/core/gang_admission.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::core {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t kGi = int64_t{1} << 30;

TEST(QuantityTest, ParsesEveryFormTheApiServerTakes) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"4", 4000},
      {"500m", 500},
      {"0.5", 500},
      {"1.5", 1500},
      {"+2", 2000},
      {"15Gi", 15 * kGi * 1000},
      {"512Mi", 512LL * 1024 * 1024 * 1000},
      {"1Ki", 1024000},
      {"1k", 1000000},
      {"2M", 2000000000},
      {"2e3", 2000000},
      {"1E3", 1000000},
      {"100n", 1},  // rounded up, never down to nothing
      {"1u", 1},
      {" 3 ", 3000},
  };
  for (const auto& [text, expected] : cases) {
    absl::StatusOr<int64_t> parsed = ParseQuantityMilli(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, expected) << text;
  }
  // 8Ei in thousandths is past int64.
  EXPECT_THAT(ParseQuantityMilli("8Ei").status().message(), HasSubstr("too large"));
}

TEST(QuantityTest, RefusesWhatIsNotAQuantityAndSaysWhy) {
  for (const char* bad : {"", "-1", "abc", "4x", "4 Gi", "Gi", ".", "1e99"}) {
    absl::StatusOr<int64_t> parsed = ParseQuantityMilli(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr(absl::StrCat("\"", bad, "\""))) << bad;
  }
  EXPECT_THAT(ParseQuantityMilli("4x").status().message(), HasSubstr("unknown suffix \"x\""));
  EXPECT_THAT(ParseQuantityMilli("-1").status().message(), HasSubstr("negative"));
}

TEST(QuantityTest, FormatsAsPeopleWriteThem) {
  EXPECT_EQ(FormatQuantity("cpu", 4000), "4");
  EXPECT_EQ(FormatQuantity("cpu", 500), "500m");
  EXPECT_EQ(FormatQuantity("memory", 15 * kGi * 1000), "15Gi");
  EXPECT_EQ(FormatQuantity("memory", 1536LL * 1024 * 1024 * 1000), "1536Mi");
  EXPECT_EQ(FormatQuantity("memory", 1000 * 1000), "1000");
  EXPECT_EQ(FormatQuantity("nvidia.com/gpu", 2000), "2");
  EXPECT_EQ(FormatAmounts(
                {{"pods", 1000}, {"nvidia.com/gpu", 1000}, {"memory", kGi * 1000}, {"cpu", 2000}}),
            "cpu 2, memory 1Gi, nvidia.com/gpu 1");
}

// A sidecar (an init container with restartPolicy Always) runs beside the
// containers: its requests add to theirs, as the scheduler counts them.
TEST(PodPlacementTest, ASidecarsRequestsAddToTheContainers) {
  const json pod = json::parse(R"({
    "metadata": {"name": "j-master-0", "namespace": "ns1"},
    "spec": {
      "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
      "initContainers": [
        {"name": "setup", "resources": {"requests": {"cpu": "2"}}},
        {"name": "kubetrain-metrics", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}]
    }})");
  absl::StatusOr<PodPlacement> parsed = ParsePodPlacement(pod);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(
      parsed->requests,
      (ResourceAmounts{{"cpu", 2010}, {"memory", (kGi + 32 * kGi / 1024) * 1000}, {"pods", 1000}}));
}

TEST(PodPlacementTest, ReadsRequestsLimitsInitContainersAndConstraints) {
  const json pod = json::parse(R"({
    "metadata": {"name": "j-worker-0", "namespace": "ns1"},
    "spec": {
      "nodeName": "n1",
      "priorityClassName": "high",
      "containers": [
        {"name": "a", "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                                    "limits": {"memory": "8Gi", "nvidia.com/gpu": 1}}},
        {"name": "b", "resources": {"requests": {"cpu": "500m"}}}
      ],
      "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
      "nodeSelector": {"pool": "gpu"},
      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
      "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
          {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
          {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]}}}
    }})");
  absl::StatusOr<PodPlacement> parsed = ParsePodPlacement(pod);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->name, "j-worker-0");
  EXPECT_EQ(parsed->ns, "ns1");
  EXPECT_EQ(parsed->node, "n1");
  EXPECT_EQ(parsed->priority_class, "high");
  // cpu: the init container's 4 beats the containers' 2.5; memory: the
  // request, not the limit; the GPU: its limit, as the API server defaults.
  EXPECT_EQ(
      parsed->requests,
      (ResourceAmounts{
          {"cpu", 4000}, {"memory", 4 * kGi * 1000}, {"nvidia.com/gpu", 1000}, {"pods", 1000}}));
  EXPECT_EQ(parsed->node_selector, (std::map<std::string, std::string>{{"pool", "gpu"}}));
  ASSERT_EQ(parsed->tolerations.size(), 1u);
  EXPECT_EQ(parsed->tolerations[0].op, "Exists");
  ASSERT_EQ(parsed->required_terms.size(), 2u);
  EXPECT_EQ(parsed->required_terms[1][0].key, "metadata.name");
}

TEST(PodPlacementTest, AMalformedFieldIsNamed) {
  json pod = {{"metadata", {{"name", "p"}}},
              {"spec", {{"containers", {{{"resources", {{"requests", {{"cpu", "two"}}}}}}}}}}};
  absl::StatusOr<PodPlacement> parsed = ParsePodPlacement(pod);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("spec.containers[0].resources.requests.cpu"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"two\""));

  pod["spec"] = {{"affinity",
                  {{"nodeAffinity",
                    {{"requiredDuringSchedulingIgnoredDuringExecution",
                      {{"nodeSelectorTerms",
                        {{{"matchExpressions", {{{"key", "zone"}, {"operator", "Near"}}}}}}}}}}}}}};
  parsed = ParsePodPlacement(pod);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("matchExpressions[0].operator: \"Near\""));
}

TEST(NodeAndQuotaTest, ReadTheirFields) {
  absl::StatusOr<NodeCapacity> node = ParseNode(json::parse(R"({
    "metadata": {"name": "n1", "labels": {"zone": "a"}},
    "spec": {"unschedulable": true, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "3800m", "memory": "14Gi", "pods": "110"}}})"));
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(node->unschedulable);
  EXPECT_EQ(node->allocatable.at("cpu"), 3800);
  EXPECT_EQ(node->allocatable.at("pods"), 110000);
  ASSERT_EQ(node->taints.size(), 1u);
  EXPECT_EQ(node->taints[0].effect, "NoSchedule");

  absl::StatusOr<NamespaceQuota> quota = ParseResourceQuota(json::parse(R"({
    "metadata": {"name": "team", "namespace": "ns1"},
    "spec": {"hard": {"requests.cpu": "10", "count/pods": 8}}})"));
  ASSERT_TRUE(quota.ok()) << quota.status();
  EXPECT_EQ(quota->hard.at("requests.cpu"), 10000);
  EXPECT_EQ(quota->hard.at("count/pods"), 8000);

  absl::StatusOr<NodeCapacity> bad =
      ParseNode({{"metadata", {{"name", "n2"}}}, {"status", {{"allocatable", {{"cpu", "x"}}}}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("node n2: status.allocatable.cpu"));
}

// ---- The planner ----

NodeCapacity Node(const std::string& name, int64_t cpus, int64_t memory_gi = 64) {
  NodeCapacity node;
  node.name = name;
  node.allocatable = {{"cpu", cpus * 1000}, {"memory", memory_gi * kGi * 1000}, {"pods", 110000}};
  return node;
}

PodPlacement Pod(const std::string& name, int64_t cpus, int64_t memory_gi = 1,
                 const std::string& ns = "ns1") {
  PodPlacement pod;
  pod.name = name;
  pod.ns = ns;
  pod.requests = {{"cpu", cpus * 1000}, {"memory", memory_gi * kGi * 1000}, {"pods", 1000}};
  return pod;
}

// A job of `replicas` pods of `cpus` each, created `created_minute` minutes after the epoch.
Gang Job(const std::string& name, int replicas, int64_t cpus, int created_minute = 0,
         const std::string& ns = "ns1") {
  Gang gang;
  gang.key = ns + "/" + name;
  gang.ns = ns;
  gang.uid = "uid-" + name;
  gang.created = absl::UnixEpoch() + absl::Minutes(created_minute);
  for (int i = 0; i < replicas; ++i) {
    gang.pods.push_back(Pod(absl::StrCat(name, "-worker-", i), cpus, 1, ns));
  }
  return gang;
}

const absl::Time kNow = absl::UnixEpoch() + absl::Hours(1);

TEST(PlanAdmissionTest, OfTwoJobsThatEachFitAloneOnlyTheFirstIsAdmitted) {
  // Room for 6 one-cpu pods on three nodes; two jobs of 4.
  ClusterState cluster{{Node("n1", 2), Node("n2", 2), Node("n3", 2)}, {}, {}};
  std::vector<AdmissionDecision> decisions =
      PlanAdmission(cluster, {Job("b", 4, 1, 1), Job("a", 4, 1, 0)}, kNow);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].key, "ns1/a");  // created first
  EXPECT_EQ(decisions[0].reason, kAdmittedReason);
  EXPECT_EQ(decisions[0].position, 0);
  EXPECT_EQ(decisions[1].key, "ns1/b");
  EXPECT_EQ(decisions[1].reason, kWaitingForCapacityReason);
  EXPECT_EQ(decisions[1].position, 1);
  EXPECT_EQ(decisions[1].message,
            "needs 4 pods of cpu 1, memory 1Gi; the cluster can place 2 of them now; no job ahead "
            "of it");
}

TEST(PlanAdmissionTest, AdmittedJobsPodsStillToBePlacedKeepTheirRoom) {
  ClusterState cluster{{Node("n1", 4), Node("n2", 4)}, {}, {}};
  Gang running = Job("a", 4, 1);
  running.admitted = true;
  // Two of its pods are bound, two not even created yet: all four count.
  PodPlacement bound0 = running.pods[0], bound1 = running.pods[1];
  bound0.node = bound1.node = "n1";
  cluster.pods = {bound0, bound1};
  std::vector<AdmissionDecision> decisions =
      PlanAdmission(cluster, {running, Job("b", 5, 1, 1)}, kNow);
  ASSERT_EQ(decisions.size(), 1u);  // the admitted gang is not decided on again
  EXPECT_EQ(decisions[0].reason, kWaitingForCapacityReason);
  EXPECT_THAT(decisions[0].message, HasSubstr("can place 4 of them now"));

  decisions = PlanAdmission(cluster, {running, Job("b", 4, 1, 1)}, kNow);
  EXPECT_EQ(decisions[0].reason, kAdmittedReason);
}

TEST(PlanAdmissionTest, PodsOfOtherOwnersCountWhereTheyAreBound) {
  ClusterState cluster{{Node("n1", 4)}, {}, {}};
  PodPlacement other = Pod("someone-elses", 3, 1, "ns2");
  other.node = "n1";
  cluster.pods = {other};
  EXPECT_EQ(PlanAdmission(cluster, {Job("a", 2, 1)}, kNow)[0].reason, kWaitingForCapacityReason);
  // Unbound pods of other owners hold nothing yet.
  cluster.pods[0].node = "";
  EXPECT_EQ(PlanAdmission(cluster, {Job("a", 2, 1)}, kNow)[0].reason, kAdmittedReason);
}

TEST(PlanAdmissionTest, HigherPriorityGoesFirstWhateverItsAge) {
  ClusterState cluster{{Node("n1", 4)}, {}, {}};
  Gang low = Job("low", 4, 1, 0);
  Gang high = Job("high", 4, 1, 30);
  high.priority = 1000;
  std::vector<AdmissionDecision> decisions = PlanAdmission(cluster, {low, high}, kNow);
  EXPECT_EQ(decisions[0].key, "ns1/high");
  EXPECT_EQ(decisions[0].reason, kAdmittedReason);
  EXPECT_EQ(decisions[1].key, "ns1/low");
  EXPECT_EQ(decisions[1].reason, kWaitingForCapacityReason);
}

TEST(PlanAdmissionTest, EqualPriorityAndAgeAreOrderedByUidSoEveryPassAgrees) {
  ClusterState cluster{{Node("n1", 4)}, {}, {}};
  Gang x = Job("x", 4, 1, 0), y = Job("y", 4, 1, 0);
  x.uid = "b";
  y.uid = "a";
  EXPECT_EQ(PlanAdmission(cluster, {x, y}, kNow)[0].key, "ns1/y");
  EXPECT_EQ(PlanAdmission(cluster, {y, x}, kNow)[0].key, "ns1/y");
}

TEST(PlanAdmissionTest, ASmallJobBackfillsUntilTheHeadHasWaitedTheLimit) {
  ClusterState cluster{{Node("n1", 4)}, {}, {}};
  PodPlacement busy = Pod("busy", 2);
  busy.node = "n1";
  cluster.pods = {busy};
  Gang big = Job("big", 4, 1, 0);
  Gang small = Job("small", 1, 1, 1);
  big.waiting_since = kNow - absl::Minutes(3);
  AdmissionPolicy policy{.backfill_limit = absl::Minutes(10)};
  std::vector<AdmissionDecision> decisions = PlanAdmission(cluster, {big, small}, kNow, policy);
  EXPECT_EQ(decisions[0].key, "ns1/big");
  EXPECT_EQ(decisions[0].reason, kWaitingForCapacityReason);
  EXPECT_EQ(decisions[1].reason, kAdmittedReason);

  big.waiting_since = kNow - absl::Minutes(10);
  decisions = PlanAdmission(cluster, {big, small}, kNow, policy);
  EXPECT_EQ(decisions[1].reason, kWaitingForCapacityReason);
  EXPECT_EQ(decisions[1].position, 2);
  EXPECT_THAT(decisions[1].message,
              HasSubstr("1 job ahead of it; jobs behind ns1/big wait for it"));
}

TEST(PlanAdmissionTest, AJobBiggerThanTheClusterNeverFitsAndSaysWhy) {
  ClusterState cluster{{Node("n1", 2, 8), Node("n2", 3, 4)}, {}, {}};
  // One pod larger than any node.
  std::vector<AdmissionDecision> decisions = PlanAdmission(cluster, {Job("huge", 1, 4)}, kNow);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].reason, kNeverFitsReason);
  EXPECT_EQ(decisions[0].position, 0);
  EXPECT_EQ(decisions[0].message,
            "needs 1 pod of cpu 4, memory 1Gi; pod huge-worker-0 needs cpu 4, memory 1Gi and the "
            "largest node that accepts it, n2, has cpu 3, memory 4Gi allocatable");
  // Every pod fits a node, but not all of them at once.
  decisions = PlanAdmission(cluster, {Job("wide", 3, 2)}, kNow);
  EXPECT_EQ(decisions[0].reason, kNeverFitsReason);
  EXPECT_THAT(decisions[0].message,
              HasSubstr("together they ask for cpu 6, memory 3Gi, more than the cluster's nodes "
                        "can hold at once even empty (cpu 5, memory 12Gi allocatable in all)"));
  // No nodes at all.
  EXPECT_THAT(PlanAdmission(ClusterState{}, {Job("a", 1, 1)}, kNow)[0].message,
              HasSubstr("the cluster has no nodes"));
  // Each job of a shape that never fits is told of its own pods.
  decisions = PlanAdmission(cluster, {Job("huge", 1, 4, 0), Job("other", 1, 4, 1)}, kNow);
  EXPECT_THAT(decisions[1].message, HasSubstr("pod other-worker-0 needs"));
  // A job that never fits holds nobody back.
  decisions = PlanAdmission(cluster, {Job("huge", 1, 4, 0), Job("ok", 1, 1, 1)}, kNow);
  EXPECT_EQ(decisions[1].reason, kAdmittedReason);
}

TEST(PlanAdmissionTest, ResourcesOnlySomeNodesHaveAndNodesThatDoNotCountPods) {
  NodeCapacity gpu = Node("gpu-1", 8);
  gpu.allocatable["nvidia.com/gpu"] = 2000;
  NodeCapacity uncounted = Node("plain-1", 8);
  uncounted.allocatable.erase("pods");  // not a real kubelet's: any number of pods
  ClusterState cluster{{gpu, uncounted}, {}, {}};
  // Two pods of one GPU each go to the GPU node; a third does not fit.
  Gang two = Job("two", 2, 1);
  for (PodPlacement& pod : two.pods) pod.requests["nvidia.com/gpu"] = 1000;
  Gang three = Job("three", 3, 1);
  for (PodPlacement& pod : three.pods) pod.requests["nvidia.com/gpu"] = 1000;
  std::vector<AdmissionDecision> decisions = PlanAdmission(cluster, {two}, kNow);
  EXPECT_EQ(decisions[0].reason, kAdmittedReason);
  decisions = PlanAdmission(cluster, {three}, kNow);
  EXPECT_EQ(decisions[0].reason, kNeverFitsReason);
  // A resource no node has never fits.
  Gang tpu = Job("tpu", 1, 1);
  tpu.pods[0].requests["google.com/tpu"] = 1000;
  decisions = PlanAdmission(cluster, {tpu}, kNow);
  EXPECT_EQ(decisions[0].reason, kNeverFitsReason);
  // 200 one-millicpu pods: far more than the GPU node's 110, all on the
  // nodes together since the other counts none.
  Gang many = Job("many", 0, 0);
  for (int i = 0; i < 200; ++i) {
    PodPlacement pod = Pod(absl::StrCat("many-", i), 0);
    pod.requests["cpu"] = 1;
    pod.requests["memory"] = 1;
    many.pods.push_back(pod);
  }
  decisions = PlanAdmission(cluster, {many}, kNow);
  EXPECT_EQ(decisions[0].reason, kAdmittedReason);
  ClusterState counted{{gpu}, {}, {}};
  decisions = PlanAdmission(counted, {many}, kNow);
  EXPECT_EQ(decisions[0].reason, kNeverFitsReason);
}

TEST(PlanAdmissionTest, SelectorsTaintsAndAffinityDecideWhichNodesCount) {
  NodeCapacity gpu = Node("gpu-1", 8);
  gpu.labels = {{"pool", "gpu"}, {"zone", "a"}};
  gpu.allocatable["nvidia.com/gpu"] = 2000;
  gpu.taints = {{"nvidia.com/gpu", "present", "NoSchedule"}};
  NodeCapacity cpu = Node("cpu-1", 8);
  cpu.labels = {{"pool", "cpu"}, {"zone", "b"}};
  ClusterState cluster{{gpu, cpu}, {}, {}};

  Gang trainer = Job("t", 1, 1);
  trainer.pods[0].requests["nvidia.com/gpu"] = 1000;
  // The GPU node is tainted: without a toleration nothing accepts the pod.
  std::vector<AdmissionDecision> decisions = PlanAdmission(cluster, {trainer}, kNow);
  EXPECT_EQ(decisions[0].reason, kNeverFitsReason);
  EXPECT_THAT(decisions[0].message, HasSubstr("pod t-worker-0 needs cpu 1, memory 1Gi, "
                                              "nvidia.com/gpu 1 and the largest node that accepts "
                                              "it, cpu-1, has cpu 8, memory 64Gi allocatable"));
  trainer.pods[0].tolerations = {{"nvidia.com/gpu", "Exists", "", "NoSchedule"}};
  EXPECT_EQ(PlanAdmission(cluster, {trainer}, kNow)[0].reason, kAdmittedReason);

  Gang pinned = Job("p", 1, 1);
  pinned.pods[0].node_selector = {{"pool", "gpu"}};
  decisions = PlanAdmission(cluster, {pinned}, kNow);
  EXPECT_EQ(decisions[0].reason, kNeverFitsReason);
  EXPECT_THAT(decisions[0].message, HasSubstr("no node accepts pod p-worker-0"));

  Gang zoned = Job("z", 1, 1);
  zoned.pods[0].required_terms = {{{"zone", "In", {"c"}}}, {{"zone", "NotIn", {"a"}}}};
  EXPECT_EQ(PlanAdmission(cluster, {zoned}, kNow)[0].reason, kAdmittedReason);  // cpu-1, zone b
  zoned.pods[0].required_terms = {{{"zone", "In", {"c"}}}};
  EXPECT_EQ(PlanAdmission(cluster, {zoned}, kNow)[0].reason, kNeverFitsReason);

  cluster.nodes[1].unschedulable = true;  // cordoned
  EXPECT_EQ(PlanAdmission(cluster, {Job("c", 1, 1)}, kNow)[0].reason, kNeverFitsReason);
}

TEST(PlanAdmissionTest, AJobOverItsNamespacesQuotaWaitsAndHoldsNoOtherNamespaceBack) {
  ClusterState cluster{{Node("n1", 16)}, {}, {}};
  cluster.quotas = {{"compute", "ns1", {{"requests.cpu", 6000}, {"count/pods", 10000}}}};
  PodPlacement running = Pod("earlier", 3);
  running.node = "n1";
  cluster.pods = {running};
  std::vector<AdmissionDecision> decisions =
      PlanAdmission(cluster, {Job("a", 4, 1, 0), Job("other", 4, 1, 1, "ns2")}, kNow);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].key, "ns1/a");
  EXPECT_EQ(decisions[0].reason, kQuotaExceededReason);
  EXPECT_EQ(decisions[0].position, 1);
  EXPECT_EQ(decisions[0].message,
            "ResourceQuota compute in namespace ns1: requests.cpu 3 of 6 used, and the job asks "
            "for 4; no job ahead of it");
  EXPECT_EQ(decisions[1].reason, kAdmittedReason);

  // Jobs admitted in the same pass count against the quota too.
  cluster.pods.clear();
  decisions = PlanAdmission(cluster, {Job("a", 4, 1, 0), Job("b", 4, 1, 1)}, kNow);
  EXPECT_EQ(decisions[0].reason, kAdmittedReason);
  EXPECT_EQ(decisions[1].reason, kQuotaExceededReason);
  EXPECT_THAT(decisions[1].message, HasSubstr("requests.cpu 4 of 6 used"));

  // Pod counts, and a job no quota could ever hold.
  cluster.quotas = {{"small", "ns1", {{"pods", 3000}}}};
  decisions = PlanAdmission(cluster, {Job("a", 4, 1)}, kNow);
  EXPECT_EQ(decisions[0].message,
            "ResourceQuota small in namespace ns1: pods 0 of 3 used, and the job asks for 4 (more "
            "than the quota allows at all); no job ahead of it");
}

TEST(PlanAdmissionTest, PodsOfDifferentSizesAreDescribedByGroup) {
  ClusterState cluster{{Node("n1", 4)}, {}, {}};
  Gang job = Job("m", 2, 2);
  job.pods.push_back(Pod("m-master-0", 4, 2));
  std::vector<AdmissionDecision> decisions = PlanAdmission(cluster, {job}, kNow);
  EXPECT_EQ(decisions[0].reason, kNeverFitsReason);
  EXPECT_THAT(decisions[0].message,
              HasSubstr("needs 3 pods (2 of cpu 2, memory 1Gi; 1 of cpu 4, memory 2Gi)"));
}

TEST(PlanAdmissionTest, LargestPodsArePlacedFirstSoMixedGangsPack) {
  // 1+2+2 on nodes of 3 and 2: the 1 placed first takes the node of 2 (it
  // fills it most), and the two 2s no longer fit; placed last, it fits.
  ClusterState cluster{{Node("n1", 3), Node("n2", 2)}, {}, {}};
  Gang job = Job("mix", 1, 1);
  job.pods.push_back(Pod("mix-master-0", 2));
  job.pods.push_back(Pod("mix-ps-0", 2));
  EXPECT_EQ(PlanAdmission(cluster, {job}, kNow)[0].reason, kAdmittedReason);
}

}  // namespace
}  // namespace kubetrain::core
