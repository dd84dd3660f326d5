// The operator's RBAC grants exactly the API calls its code makes.
#include <dirent.h>

#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/deploy/manifest_checks.h"
#include "tests/deploy/rbac_calls.h"

namespace kubetrain::deploy_testing {
namespace {

const std::map<std::string, std::string> kResources = {{"kPods", "/pods"},
                                                       {"kJobs", "kubetrain.io/trainingjobs"},
                                                       {"kLeases", "coordination.k8s.io/leases"}};

std::set<Permission> Keys(const std::map<Permission, std::vector<CallSite>>& calls) {
  std::set<Permission> out;
  for (const auto& [permission, unused] : calls) out.insert(permission);
  return out;
}

TEST(ExtractPermissionsTest, NamedConstantsAndVerbs) {
  auto calls = ExtractPermissions(
      {{"a.cc",
        "void F() { client_->Create(kPods, ns, o); client_->Get(kJobs, ns, n);\n"
        "  client_->MergePatch(kJobs, ns, n, p, false); client_->Delete(kPods, ns, n); }"}},
      kResources);
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_EQ(Keys(*calls), (std::set<Permission>{{"create", "/pods"},
                                                {"get", "kubetrain.io/trainingjobs"},
                                                {"patch", "kubetrain.io/trainingjobs"},
                                                {"delete", "/pods"}}));
  EXPECT_EQ(calls->at({"create", "/pods"}).front().line, 1);
}

TEST(ExtractPermissionsTest, StatusSubresourceOnlyWithLiteralTrue) {
  auto calls = ExtractPermissions({{"a.cc",
                                    "void F() { client_->Update(kJobs, ns, o, /*status=*/true);\n"
                                    "client_->Update(kLeases, ns, o, false); }"}},
                                  kResources);
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_EQ(Keys(*calls), (std::set<Permission>{{"update", "kubetrain.io/trainingjobs/status"},
                                                {"update", "coordination.k8s.io/leases"}}));

  auto unknown =
      ExtractPermissions({{"a.cc", "void F() { client_->Update(kJobs, ns, o, s); }"}}, kResources);
  EXPECT_FALSE(unknown.ok());
}

TEST(ExtractPermissionsTest, PointerResolvedWithinItsFunctionOnly) {
  auto calls = ExtractPermissions(
      {{"a.cc",
        "namespace x {\nvoid F() { const Resource* resource; if (a) resource = &kPods;\n"
        "  client_->Delete(*resource, ns, n); }\n"
        "void G() { const Resource* r = &kLeases; }\n}"}},
      kResources);
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_EQ(Keys(*calls), (std::set<Permission>{{"delete", "/pods"}}));
}

TEST(ExtractPermissionsTest, InformerResourcesComeFromWhereInformersAreBuilt) {
  auto calls = ExtractPermissions(
      {{"informer.cc",
        "void Informer::Run() { client_->List(options_.resource, ns, o);\n"
        "client_->Watch(options_.resource, ns, w); }"},
       {"controller.cc", "void C() { jobs_ = MakeInformer(InformerOptions{.resource = kJobs}); }"}},
      kResources);
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_EQ(Keys(*calls), (std::set<Permission>{{"list", "kubetrain.io/trainingjobs"},
                                                {"watch", "kubetrain.io/trainingjobs"}}));
}

TEST(ExtractPermissionsTest, UnresolvableResourceIsAnError) {
  auto calls = ExtractPermissions(
      {{"a.cc", "void F(const Resource& r) { client_->Get(r, ns, n); }"}}, kResources);
  ASSERT_FALSE(calls.ok());
  EXPECT_TRUE(absl::StrContains(calls.status().message(), "a.cc:1")) << calls.status();
}

TEST(ExtractPermissionsTest, CommentsAreNotCalls) {
  auto calls = ExtractPermissions(
      {{"a.cc",
        "// client_->Delete(kJobs, ns, n);\n/* client_->Create(kJobs, ns, o); */\n"
        "void F() { client_->List(kPods, ns, o); }"}},
      kResources);
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_EQ(Keys(*calls), (std::set<Permission>{{"list", "/pods"}}));
}

TEST(GrantedPermissionsTest, ExpandsRulesAndRefusesWildcards) {
  auto granted = GrantedPermissions(
      "- apiGroups: ['']\n  resources: [pods, services]\n  verbs: [create, delete]\n");
  ASSERT_TRUE(granted.ok()) << granted.status();
  EXPECT_EQ(*granted, (std::set<Permission>{{"create", "/pods"},
                                            {"create", "/services"},
                                            {"delete", "/pods"},
                                            {"delete", "/services"}}));
  EXPECT_FALSE(GrantedPermissions("- apiGroups: ['']\n  resources: ['*']\n  verbs: [get]\n").ok());
  EXPECT_FALSE(GrantedPermissions("- apiGroups: ['']\n  resources: [pods]\n  verbs: ['*']\n").ok());
}

// ---- The real operator code against the real manifests. ----

std::vector<std::string> OperatorSources(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(SourcePath(dir).c_str());
  if (d == nullptr) return out;
  while (dirent* entry = readdir(d)) {
    std::string name = entry->d_name;
    if (!absl::EndsWith(name, ".cc") || absl::EndsWith(name, "_test.cc") ||
        absl::EndsWith(name, "_fuzzer.cc")) {
      continue;
    }
    // The REST client implements ClusterClient; its callers are what count.
    if (name == "rest_client.cc") continue;
    out.push_back(dir + "/" + name);
  }
  closedir(d);
  return out;
}

class OperatorRbacTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto header = ReadFile(SourcePath("operator/kube/cluster_client.h"));
    ASSERT_TRUE(header.ok()) << header.status();
    auto resources = ParseResourceConstants(*header);
    ASSERT_TRUE(resources.ok()) << resources.status();
    std::map<std::string, std::string> sources;
    for (const char* dir : {"operator/kube", "operator/cmd"}) {
      for (const std::string& file : OperatorSources(dir)) {
        auto text = ReadFile(SourcePath(file));
        ASSERT_TRUE(text.ok()) << text.status();
        sources[file] = *text;
      }
    }
    ASSERT_FALSE(sources.empty());
    auto calls = ExtractPermissions(sources, *resources);
    ASSERT_TRUE(calls.ok()) << calls.status();
    calls_ = *calls;
    needed_ = Keys(calls_);

    // Replicas carry ownerReferences with blockOwnerDeletion: true, which
    // OwnerReferencesPermissionEnforcement admits only from whoever may
    // update the owner's finalizers.
    auto objects = ReadFile(SourcePath("operator/core/kube_objects.cc"));
    ASSERT_TRUE(objects.ok()) << objects.status();
    if (absl::StrContains(*objects, "{\"blockOwnerDeletion\", true}")) {
      needed_.insert({"update", "kubetrain.io/trainingjobs/finalizers"});
    }
  }

  std::set<Permission> GrantedBy(const std::string& file) {
    auto text = ReadFile(SourcePath(file));
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) return {};
    auto docs = ParseDocuments(*text);
    EXPECT_TRUE(docs.ok()) << docs.status();
    if (!docs.ok() || docs->empty()) return {};
    YAML::Emitter rules;
    rules << (*docs)[0]["rules"];
    auto granted = GrantedPermissions(rules.c_str());
    EXPECT_TRUE(granted.ok()) << file << ": " << granted.status();
    return granted.ok() ? *granted : std::set<Permission>{};
  }

  std::string Explain(const std::set<Permission>& granted) {
    std::string out;
    for (const Permission& p : needed_) {
      if (granted.count(p) == 0) {
        absl::StrAppend(&out, "\n  missing ", p.first, " ", p.second);
        auto it = calls_.find(p);
        if (it != calls_.end()) {
          absl::StrAppend(&out, " (", it->second.front().file, ":", it->second.front().line, ")");
        }
      }
    }
    for (const Permission& p : granted) {
      if (needed_.count(p) == 0)
        absl::StrAppend(&out, "\n  not used by the operator: ", p.first, " ", p.second);
    }
    return out;
  }

  std::map<Permission, std::vector<CallSite>> calls_;
  std::set<Permission> needed_;
};

TEST_F(OperatorRbacTest, ClusterRoleAndLeaseRoleGrantExactlyWhatTheCodeCalls) {
  // The extraction found the controller's core calls at all.
  ASSERT_TRUE(needed_.count({"create", "/pods"}) && needed_.count({"watch", "/pods"}) &&
              needed_.count({"update", "kubetrain.io/trainingjobs/status"}))
      << "extraction found too little; operator/kube changed shape?";
  std::set<Permission> granted = GrantedBy("deploy/rbac/cluster/cluster_role.yaml");
  for (const char* optional :
       {"deploy/rbac/base/leader_election_role.yaml", "deploy/rbac/podgroups/cluster_role.yaml"}) {
    for (const Permission& p : GrantedBy(optional)) granted.insert(p);
  }
  EXPECT_EQ(granted, needed_) << Explain(granted);
}

TEST_F(OperatorRbacTest, PodGroupsAreAnOptionalRoleOfTheirOwn) {
  // Only clusters with a gang scheduler have the CRDs; the main role does
  // not grant them.
  const std::set<Permission> pod_groups = GrantedBy("deploy/rbac/podgroups/cluster_role.yaml");
  EXPECT_EQ(pod_groups, (std::set<Permission>{{"create", "scheduling.x-k8s.io/podgroups"},
                                              {"create", "scheduling.volcano.sh/podgroups"}}));
  for (const Permission& p : GrantedBy("deploy/rbac/cluster/cluster_role.yaml")) {
    EXPECT_EQ(pod_groups.count(p), 0u) << p.first << " " << p.second;
  }
}

TEST_F(OperatorRbacTest, LeasesOnlyInTheOperatorsNamespace) {
  for (const Permission& p : GrantedBy("deploy/rbac/cluster/cluster_role.yaml")) {
    EXPECT_FALSE(absl::StartsWith(p.second, "coordination.k8s.io/")) << p.first << " " << p.second;
  }
  // The Lease, and the leader's label on its own pod (kubetrain.io/metrics-leader).
  EXPECT_EQ(GrantedBy("deploy/rbac/base/leader_election_role.yaml"),
            (std::set<Permission>{{"get", "coordination.k8s.io/leases"},
                                  {"create", "coordination.k8s.io/leases"},
                                  {"update", "coordination.k8s.io/leases"},
                                  {"list", "/pods"},
                                  {"patch", "/pods"}}));
}

TEST_F(OperatorRbacTest, NamespacedRoleGrantsWhatTheClusterRoleGrants) {
  // What is cluster-scoped (nodes, priority classes, the pods on the nodes)
  // only a ClusterRole can grant; the rest, the Role in the namespace.
  std::set<Permission> granted = GrantedBy("deploy/rbac/namespaced/role.yaml");
  const std::set<Permission> cluster_wide = GrantedBy("deploy/rbac/admission/cluster_role.yaml");
  EXPECT_EQ(cluster_wide, (std::set<Permission>{{"list", "/nodes"},
                                                {"watch", "/nodes"},
                                                {"list", "/pods"},
                                                {"watch", "/pods"},
                                                {"list", "scheduling.k8s.io/priorityclasses"},
                                                {"watch", "scheduling.k8s.io/priorityclasses"}}));
  granted.insert(cluster_wide.begin(), cluster_wide.end());
  EXPECT_EQ(granted, GrantedBy("deploy/rbac/cluster/cluster_role.yaml"));
}

TEST_F(OperatorRbacTest, HelmChartRulesAreTheClusterRoles) {
  auto helpers = ReadFile(SourcePath("helm/kubetrain/templates/_helpers.tpl"));
  ASSERT_TRUE(helpers.ok()) << helpers.status();
  const std::string open = "{{- define \"kubetrain.operatorRules\" -}}";
  size_t begin = helpers->find(open);
  ASSERT_NE(begin, std::string::npos);
  begin += open.size();
  size_t end = helpers->find("{{- end -}}", begin);
  ASSERT_NE(end, std::string::npos);
  auto granted = GrantedPermissions(helpers->substr(begin, end - begin));
  ASSERT_TRUE(granted.ok()) << granted.status();
  EXPECT_EQ(*granted, GrantedBy("deploy/rbac/cluster/cluster_role.yaml"));
}

}  // namespace
}  // namespace kubetrain::deploy_testing
