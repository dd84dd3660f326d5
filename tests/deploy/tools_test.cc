// What `kubectl kustomize deploy/` and the Helm chart render: every object
// parses and carries the fields issue 8 asks for, and the RBAC they render is
// the checked one (rbac_test.cc). Helm tests skip when helm is not installed
// (scripts/test.sh installs it with scripts/install-helm.sh).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/deploy/manifest_checks.h"
#include "tests/deploy/rbac_calls.h"

namespace kubetrain::deploy_testing {
namespace {

std::string Str(const YAML::Node& node) {
  return node && node.IsScalar() ? node.as<std::string>() : std::string();
}

std::vector<YAML::Node> Render(const std::string& command) {
  CommandResult result = RunCommand(command);
  EXPECT_EQ(result.exit_code, 0) << command << "\n" << result.output;
  auto docs = ParseDocuments(result.output);
  EXPECT_TRUE(docs.ok()) << command << ": " << docs.status();
  return docs.ok() ? *docs : std::vector<YAML::Node>{};
}

const YAML::Node* Find(const std::vector<YAML::Node>& docs, const std::string& kind) {
  for (const YAML::Node& doc : docs) {
    if (Str(doc["kind"]) == kind) return &doc;
  }
  return nullptr;
}

std::multiset<std::string> Kinds(const std::vector<YAML::Node>& docs) {
  std::multiset<std::string> kinds;
  for (const YAML::Node& doc : docs) kinds.insert(Str(doc["kind"]));
  return kinds;
}

std::set<Permission> Granted(const std::vector<YAML::Node>& docs, const std::string& kind,
                             const std::string& name) {
  auto rules = RulesOf(docs, kind, name);
  EXPECT_TRUE(rules.ok()) << rules.status();
  if (!rules.ok()) return {};
  auto granted = GrantedPermissions(*rules);
  EXPECT_TRUE(granted.ok()) << granted.status();
  return granted.ok() ? *granted : std::set<Permission>{};
}

std::set<Permission> CheckedClusterRole() {
  auto text = ReadFile(SourcePath("deploy/rbac/cluster/cluster_role.yaml"));
  EXPECT_TRUE(text.ok()) << text.status();
  auto docs = ParseDocuments(text.ok() ? *text : "");
  EXPECT_TRUE(docs.ok());
  return docs.ok() ? Granted(*docs, "ClusterRole", "") : std::set<Permission>{};
}

void ExpectEveryObjectWellFormed(const std::vector<YAML::Node>& docs) {
  for (const YAML::Node& doc : docs) {
    EXPECT_FALSE(Str(doc["apiVersion"]).empty()) << YAML::Dump(doc).substr(0, 200);
    EXPECT_FALSE(Str(doc["kind"]).empty()) << YAML::Dump(doc).substr(0, 200);
    EXPECT_FALSE(Str(doc["metadata"]["name"]).empty()) << YAML::Dump(doc).substr(0, 200);
  }
}

// The runtime catalog: a ConfigMap `name` with a runtimes.yaml, mounted into
// the operator, whose --runtime-catalog names the file. Returns the ConfigMap.
const YAML::Node* ExpectRuntimeCatalogMounted(const std::vector<YAML::Node>& docs,
                                              const YAML::Node& deployment,
                                              const std::string& name) {
  const YAML::Node* config_map = nullptr;
  for (const YAML::Node& doc : docs) {
    if (Str(doc["kind"]) == "ConfigMap" && Str(doc["metadata"]["name"]) == name) config_map = &doc;
  }
  EXPECT_NE(config_map, nullptr) << name;
  if (config_map == nullptr) return nullptr;
  EXPECT_TRUE((*config_map)["data"]["runtimes.yaml"].IsDefined());
  const YAML::Node pod = deployment["spec"]["template"]["spec"];
  std::string mount_path;
  for (const auto& volume : pod["volumes"]) {
    if (Str(volume["configMap"]["name"]) != name) continue;
    for (const auto& mount : pod["containers"][0]["volumeMounts"]) {
      if (Str(mount["name"]) == Str(volume["name"])) mount_path = Str(mount["mountPath"]);
    }
  }
  EXPECT_FALSE(mount_path.empty()) << name << " is not mounted into the operator";
  bool flag = false;
  for (const auto& arg : pod["containers"][0]["args"]) {
    flag |= Str(arg) == "--runtime-catalog=" + mount_path + "/runtimes.yaml";
  }
  EXPECT_TRUE(flag) << "no --runtime-catalog=" << mount_path << "/runtimes.yaml";
  return config_map;
}

// ---- kubectl kustomize ----

class KustomizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnPath("kubectl")) GTEST_SKIP() << "kubectl is not installed";
  }
};

TEST_F(KustomizeTest, DeployRendersCrdRbacAndOperator) {
  std::vector<YAML::Node> docs = Render("kubectl kustomize " + SourcePath("deploy"));
  ExpectEveryObjectWellFormed(docs);
  EXPECT_EQ(Kinds(docs),
            (std::multiset<std::string>{"Namespace", "CustomResourceDefinition", "ServiceAccount",
                                        "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                                        "Service", "Service", "Deployment", "ConfigMap"}));
  for (const YAML::Node& doc : docs) {
    const std::string kind = Str(doc["kind"]);
    if (kind == "Namespace" || kind == "CustomResourceDefinition" ||
        absl::StartsWith(kind, "Cluster")) {
      continue;
    }
    EXPECT_EQ(Str(doc["metadata"]["namespace"]), "kubetrain-system") << kind;
  }
  const YAML::Node* crd = Find(docs, "CustomResourceDefinition");
  ASSERT_NE(crd, nullptr);
  EXPECT_EQ(Str((*crd)["metadata"]["name"]), "trainingjobs.kubetrain.io");
  const YAML::Node* deployment = Find(docs, "Deployment");
  ASSERT_NE(deployment, nullptr);
  std::vector<std::string> problems = OperatorDeploymentProblems(*deployment, 2);
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  EXPECT_EQ(Granted(docs, "ClusterRole", "kubetrain-operator"), CheckedClusterRole());
  // The binding names the service account the Deployment runs as.
  const YAML::Node* binding = Find(docs, "ClusterRoleBinding");
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ(Str((*binding)["subjects"][0]["name"]),
            Str((*deployment)["spec"]["template"]["spec"]["serviceAccountName"]));
  EXPECT_EQ(Str((*binding)["subjects"][0]["namespace"]), "kubetrain-system");
  EXPECT_EQ(DefaultImageArg(*deployment), VersionedRuntimeImage());
  ExpectRuntimeCatalogMounted(docs, *deployment, "kubetrain-runtimes");
}

TEST_F(KustomizeTest, NamespacedOverlayUsesRolesOnly) {
  std::vector<YAML::Node> docs =
      Render("kubectl kustomize " + SourcePath("deploy/overlays/namespaced"));
  ExpectEveryObjectWellFormed(docs);
  EXPECT_EQ(Kinds(docs).count("ClusterRole"), 0u);
  EXPECT_EQ(Kinds(docs).count("ClusterRoleBinding"), 0u);
  for (const YAML::Node& doc : docs) EXPECT_EQ(Str(doc["metadata"]["namespace"]), "ml-team");
  // All of the ClusterRole but what is cluster-scoped (gang admission's
  // reads, which deploy/rbac/admission adds where it is turned on).
  std::set<Permission> cluster_role = CheckedClusterRole();
  for (const char* verb : {"list", "watch"}) {
    cluster_role.erase({verb, "/nodes"});
    cluster_role.erase({verb, "scheduling.k8s.io/priorityclasses"});
  }
  EXPECT_EQ(Granted(docs, "Role", "kubetrain-operator"), cluster_role);
  const YAML::Node* deployment = Find(docs, "Deployment");
  ASSERT_NE(deployment, nullptr);
  std::vector<std::string> problems = OperatorDeploymentProblems(*deployment, 2);
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  bool watches_ml_team = false;
  for (const auto& arg : (*deployment)["spec"]["template"]["spec"]["containers"][0]["args"]) {
    watches_ml_team |= Str(arg) == "--namespace=ml-team";
  }
  EXPECT_TRUE(watches_ml_team);
  EXPECT_EQ(DefaultImageArg(*deployment), VersionedRuntimeImage());
}

// ---- helm ----

class HelmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!OnPath("helm")) {
      GTEST_SKIP() << "helm is not installed (scripts/install-helm.sh installs it)";
    }
  }
  static std::string Chart() { return SourcePath("helm/kubetrain"); }
  static std::string Values(const std::string& name) {
    return SourcePath("helm/kubetrain/ci/" + name + "-values.yaml");
  }
};

TEST_F(HelmTest, LintPassesWithDefaultAndNonDefaultValues) {
  for (const std::string& flags :
       {std::string(), " -f " + Values("namespaced"), " -f " + Values("single-replica")}) {
    CommandResult result = RunCommand("helm lint --strict " + Chart() + flags);
    EXPECT_EQ(result.exit_code, 0) << flags << "\n" << result.output;
  }
}

TEST_F(HelmTest, DefaultValuesRenderAClusterWideOperator) {
  std::vector<YAML::Node> docs =
      Render("helm template kt " + Chart() + " --namespace kubetrain-system --include-crds");
  ExpectEveryObjectWellFormed(docs);
  EXPECT_EQ(Kinds(docs),
            (std::multiset<std::string>{"CustomResourceDefinition", "ServiceAccount", "ClusterRole",
                                        "ClusterRoleBinding", "Role", "RoleBinding", "Service",
                                        "Service", "Deployment", "ConfigMap"}));
  const YAML::Node* deployment = Find(docs, "Deployment");
  ASSERT_NE(deployment, nullptr);
  std::vector<std::string> problems = OperatorDeploymentProblems(*deployment, 2);
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  EXPECT_EQ(DefaultImageArg(*deployment), VersionedRuntimeImage());
  EXPECT_EQ(Str((*deployment)["spec"]["template"]["spec"]["containers"][0]["image"]),
            "kubetrain/kubetrain-operator:" + ProjectVersion());
  EXPECT_EQ(Granted(docs, "ClusterRole", ""), CheckedClusterRole());
  EXPECT_EQ(Granted(docs, "Role", ""),
            (std::set<Permission>{{"get", "coordination.k8s.io/leases"},
                                  {"create", "coordination.k8s.io/leases"},
                                  {"update", "coordination.k8s.io/leases"},
                                  {"list", "/pods"},
                                  {"patch", "/pods"}}));
  // Trials report to the Service that follows the leader's label.
  const YAML::Node* trials = nullptr;
  for (const YAML::Node& doc : docs) {
    if (Str(doc["kind"]) == "Service" &&
        Str(doc["metadata"]["name"]) == "kt-kubetrain-operator-trials") {
      trials = &doc;
    }
  }
  ASSERT_NE(trials, nullptr);
  EXPECT_EQ(Str((*trials)["spec"]["selector"]["kubetrain.io/metrics-leader"]), "true");
  const YAML::Node* catalog =
      ExpectRuntimeCatalogMounted(docs, *deployment, "kt-kubetrain-operator-runtimes");
  ASSERT_NE(catalog, nullptr);
  EXPECT_EQ(Str((*catalog)["data"]["runtimes.yaml"]), "runtimes: []\n");
  const YAML::Node container = (*deployment)["spec"]["template"]["spec"]["containers"][0];
  std::set<std::string> args;
  for (const auto& arg : container["args"]) args.insert(Str(arg));
  for (const char* want :
       {"--metrics-listen=:9091", "--pod-name=$(POD_NAME)",
        "--metrics-address=kt-kubetrain-operator-trials.$(POD_NAMESPACE).svc:9091"}) {
    EXPECT_EQ(args.count(want), 1u) << want;
  }
}

TEST_F(HelmTest, GangAdmissionInOneNamespaceAddsAReadOnlyClusterRole) {
  std::vector<YAML::Node> docs = Render(
      "helm template kt " + Chart() + " --namespace kubetrain-system -f " + Values("namespaced") +
      " --set admission.enabled=true --set admission.backfillLimit=3m");
  ExpectEveryObjectWellFormed(docs);
  EXPECT_EQ(Granted(docs, "ClusterRole", "kt-kubetrain-operator-admission"),
            (std::set<Permission>{{"list", "/nodes"},
                                  {"watch", "/nodes"},
                                  {"list", "/pods"},
                                  {"watch", "/pods"},
                                  {"list", "scheduling.k8s.io/priorityclasses"},
                                  {"watch", "scheduling.k8s.io/priorityclasses"}}));
  const YAML::Node* deployment = Find(docs, "Deployment");
  ASSERT_NE(deployment, nullptr);
  std::set<std::string> args;
  for (const auto& arg : (*deployment)["spec"]["template"]["spec"]["containers"][0]["args"]) {
    args.insert(Str(arg));
  }
  EXPECT_EQ(args.count("--gang-admission=true"), 1u);
  EXPECT_EQ(args.count("--admission-backfill-limit=3m"), 1u);
}

TEST_F(HelmTest, PodGroupsAddTheirOwnRoleBoundWhereTheOperatorWatches) {
  const std::set<Permission> pod_groups = {{"create", "scheduling.x-k8s.io/podgroups"},
                                           {"create", "scheduling.volcano.sh/podgroups"}};
  std::vector<YAML::Node> docs = Render(
      "helm template kt " + Chart() + " --namespace kubetrain-system --set podGroups.enabled=true");
  ExpectEveryObjectWellFormed(docs);
  EXPECT_EQ(Granted(docs, "ClusterRole", "kt-kubetrain-operator-podgroups"), pod_groups);
  EXPECT_EQ(Kinds(docs).count("ClusterRoleBinding"), 2u);
  docs = Render("helm template kt " + Chart() + " --namespace kubetrain-system -f " +
                Values("namespaced") + " --set podGroups.enabled=true");
  ExpectEveryObjectWellFormed(docs);
  EXPECT_EQ(Granted(docs, "ClusterRole", "kt-kubetrain-operator-podgroups"), pod_groups);
  bool bound_in_ml_team = false;
  for (const YAML::Node& doc : docs) {
    bound_in_ml_team |= Str(doc["kind"]) == "RoleBinding" &&
                        Str(doc["metadata"]["name"]) == "kt-kubetrain-operator-podgroups" &&
                        Str(doc["metadata"]["namespace"]) == "ml-team";
  }
  EXPECT_TRUE(bound_in_ml_team);
  EXPECT_EQ(Kinds(docs).count("ClusterRoleBinding"), 0u);
}

TEST_F(HelmTest, OneWatchedNamespaceRendersRolesThere) {
  std::vector<YAML::Node> docs = Render("helm template kt " + Chart() +
                                        " --namespace kubetrain-system -f " + Values("namespaced"));
  ExpectEveryObjectWellFormed(docs);
  EXPECT_EQ(Kinds(docs).count("ClusterRole"), 0u);
  EXPECT_EQ(Kinds(docs).count("ServiceMonitor"), 1u);
  EXPECT_EQ(Kinds(docs).count("ConfigMap"), 1u);  // the runtime catalog
  bool found_operator_role = false;
  for (const YAML::Node& doc : docs) {
    if (Str(doc["kind"]) != "Role" || Str(doc["metadata"]["namespace"]) != "ml-team") continue;
    found_operator_role = true;
    auto granted = GrantedPermissions(YAML::Dump(doc["rules"]));
    ASSERT_TRUE(granted.ok()) << granted.status();
    EXPECT_EQ(*granted, CheckedClusterRole());
  }
  EXPECT_TRUE(found_operator_role);
  const YAML::Node* deployment = Find(docs, "Deployment");
  ASSERT_NE(deployment, nullptr);
  // The values' runtime, rendered into the catalog the operator reads.
  const YAML::Node* catalog =
      ExpectRuntimeCatalogMounted(docs, *deployment, "kt-kubetrain-operator-runtimes");
  ASSERT_NE(catalog, nullptr);
  EXPECT_THAT(Str((*catalog)["data"]["runtimes.yaml"]),
              ::testing::HasSubstr("image: registry.example.com/ml/tensorflow-runtime:1.15-py3.7"));
  std::vector<std::string> problems = OperatorDeploymentProblems(*deployment, 3);
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  const YAML::Node container = (*deployment)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(Str(container["image"]), "registry.example.com/ml/kubetrain-operator:0.1.0-rc1");
  std::set<std::string> args;
  for (const auto& arg : container["args"]) args.insert(Str(arg));
  for (const char* want :
       {"--namespace=ml-team", "--log-level=debug", "--http-address=:9090", "--lease-name=kt-lease",
        "--workers=8", "--default-image=registry.example.com/ml/kubetrain-runtime:0.1.0"}) {
    EXPECT_EQ(args.count(want), 1u) << want;
  }
}

TEST_F(HelmTest, SingleReplicaWithoutLeaderElection) {
  std::vector<YAML::Node> docs =
      Render("helm template kt " + Chart() + " --namespace kubetrain-system -f " +
             Values("single-replica"));
  EXPECT_EQ(Kinds(docs).count("Role"), 0u);  // no Lease rights
  // Only the trials' Service (no /metrics one); with one replica and no
  // election it selects the operator's pod without a leader label.
  ASSERT_EQ(Kinds(docs).count("Service"), 1u);
  const YAML::Node* trials = Find(docs, "Service");
  ASSERT_NE(trials, nullptr);
  EXPECT_EQ(Str((*trials)["metadata"]["name"]), "kt-kubetrain-operator-trials");
  EXPECT_FALSE((*trials)["spec"]["selector"]["kubetrain.io/metrics-leader"].IsDefined());
  const YAML::Node* deployment = Find(docs, "Deployment");
  ASSERT_NE(deployment, nullptr);
  std::vector<std::string> problems = OperatorDeploymentProblems(*deployment, 1);
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
}

TEST_F(HelmTest, RefusesValuesThatCannotWork) {
  struct Case {
    std::string set, message;
  };
  for (const Case& c :
       std::vector<Case>{{"watchNamespaces={a,b}", "exactly one"},
                         {"replicas=2,leaderElection.enabled=false", "needs leaderElection"},
                         {"logLevel=loud", "logLevel"}}) {
    CommandResult result =
        RunCommand("helm template kt " + Chart() + " --namespace k --set " + c.set);
    EXPECT_NE(result.exit_code, 0) << c.set;
    EXPECT_TRUE(absl::StrContains(result.output, c.message)) << c.set << "\n" << result.output;
  }
}

}  // namespace
}  // namespace kubetrain::deploy_testing
