#include "tests/fake_apiserver/pod_security.h"

#include "gtest/gtest.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;

json BarePod() {
  return json::parse(R"({"metadata": {"name": "bad"},
                         "spec": {"containers": [{"name": "bad", "image": "nginx"}]}})");
}

// What the restricted profile asks of every pod, as kubetrain renders it.
json RestrictedPod() {
  return json::parse(R"({
    "metadata": {"name": "good"},
    "spec": {
      "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
      "volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": "c"}},
                  {"name": "pkg", "configMap": {"name": "m"}}],
      "containers": [{"name": "kubetrain", "image": "kubetrain/kubetrain-runtime",
                      "ports": [{"containerPort": 2222}],
                      "securityContext": {"allowPrivilegeEscalation": false,
                                          "capabilities": {"drop": ["ALL"],
                                                           "add": ["NET_BIND_SERVICE"]}}}]}})");
}

TEST(PodSecurityTest, PolicyComesFromTheNamespaceLabels) {
  EXPECT_EQ(EnforcedPodSecurityPolicy({}), std::nullopt);
  EXPECT_EQ(EnforcedPodSecurityPolicy({{kPodSecurityEnforceLabel, "privileged"}}), std::nullopt);
  EXPECT_EQ(EnforcedPodSecurityPolicy({{kPodSecurityEnforceLabel, "restricted"}}),
            "restricted:latest");
  EXPECT_EQ(EnforcedPodSecurityPolicy({{kPodSecurityEnforceLabel, "baseline"},
                                       {kPodSecurityEnforceVersionLabel, "v1.30"}}),
            "baseline:v1.30");
  // A level the admission does not know is enforced as the strictest, a
  // version it cannot read as the latest.
  EXPECT_EQ(EnforcedPodSecurityPolicy({{kPodSecurityEnforceLabel, "strict"}}), "restricted:latest");
  EXPECT_EQ(EnforcedPodSecurityPolicy({{kPodSecurityEnforceLabel, "baseline"},
                                       {kPodSecurityEnforceVersionLabel, "1.30"}}),
            "baseline:latest");
}

TEST(PodSecurityTest, RestrictedRefusesABarePodInTheRealServersWords) {
  // The message kube-apiserver gives `kubectl run bad --image=nginx` in a
  // restricted namespace.
  EXPECT_EQ(PodSecurityViolation("restricted:latest", BarePod()),
            "violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false "
            "(container \"bad\" must set securityContext.allowPrivilegeEscalation=false), "
            "unrestricted capabilities (container \"bad\" must set "
            "securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or "
            "container \"bad\" must set securityContext.runAsNonRoot=true), seccompProfile (pod "
            "or container \"bad\" must set securityContext.seccompProfile.type to "
            "\"RuntimeDefault\" or \"Localhost\")");
  EXPECT_EQ(PodSecurityViolation("baseline:latest", BarePod()), std::nullopt);
}

TEST(PodSecurityTest, RestrictedAdmitsWhatItAsksFor) {
  EXPECT_EQ(PodSecurityViolation("restricted:latest", RestrictedPod()), std::nullopt);
  EXPECT_EQ(PodSecurityViolation("baseline:latest", RestrictedPod()), std::nullopt);
}

TEST(PodSecurityTest, EachRestrictedRuleNamesWhoBreaksIt) {
  json root = RestrictedPod();
  root["spec"]["securityContext"]["runAsUser"] = 0;
  EXPECT_EQ(PodSecurityViolation("restricted:latest", root),
            "violates PodSecurity \"restricted:latest\": runAsUser=0 (pod must not set "
            "runAsUser=0)");

  json opted_out = RestrictedPod();
  opted_out["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = false;
  EXPECT_EQ(PodSecurityViolation("restricted:latest", opted_out),
            "violates PodSecurity \"restricted:latest\": runAsNonRoot != true (container "
            "\"kubetrain\" must not set securityContext.runAsNonRoot=false)");

  // Init containers count as containers; a pod-level runAsNonRoot covers them.
  json with_init = RestrictedPod();
  with_init["spec"]["initContainers"] = json::array({{{"name", "fetch"}, {"image", "busybox"}}});
  EXPECT_EQ(PodSecurityViolation("restricted:latest", with_init),
            "violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false "
            "(container \"fetch\" must set securityContext.allowPrivilegeEscalation=false), "
            "unrestricted capabilities (container \"fetch\" must set "
            "securityContext.capabilities.drop=[\"ALL\"])");

  json capable = RestrictedPod();
  capable["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
      json::array({"SYS_ADMIN", "NET_BIND_SERVICE"});
  EXPECT_EQ(PodSecurityViolation("restricted:latest", capable),
            "violates PodSecurity \"restricted:latest\": unrestricted capabilities (container "
            "\"kubetrain\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)");

  json unconfined = RestrictedPod();
  unconfined["spec"]["securityContext"]["seccompProfile"]["type"] = "Unconfined";
  EXPECT_EQ(PodSecurityViolation("restricted:latest", unconfined),
            "violates PodSecurity \"restricted:latest\": seccompProfile (pod must not set "
            "securityContext.seccompProfile.type to \"Unconfined\")");
  EXPECT_EQ(PodSecurityViolation("baseline:latest", unconfined),
            "violates PodSecurity \"baseline:latest\": seccompProfile (pod must not set "
            "securityContext.seccompProfile.type to \"Unconfined\")");
}

TEST(PodSecurityTest, HostAccessIsRefusedFromBaselineUp) {
  json host = RestrictedPod();
  host["spec"]["hostNetwork"] = true;
  host["spec"]["volumes"].push_back({{"name", "nvidia"}, {"hostPath", {{"path", "/dev"}}}});
  host["spec"]["containers"][0]["securityContext"]["privileged"] = true;
  host["spec"]["containers"][0]["ports"][0]["hostPort"] = 2222;
  // The same host port twice is named once.
  host["spec"]["containers"][0]["ports"].push_back({{"containerPort", 80}, {"hostPort", 2222}});
  EXPECT_EQ(PodSecurityViolation("baseline:latest", host),
            "violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true), "
            "hostPath volumes (volume \"nvidia\"), hostPort (container \"kubetrain\" uses "
            "hostPort 2222), privileged (container \"kubetrain\" must not set "
            "securityContext.privileged=true)");
  // Restricted says the hostPath is a restricted volume type instead.
  EXPECT_EQ(PodSecurityViolation("restricted:latest", host),
            "violates PodSecurity \"restricted:latest\": host namespaces (hostNetwork=true), "
            "hostPort (container \"kubetrain\" uses hostPort 2222), privileged (container "
            "\"kubetrain\" must not set securityContext.privileged=true), restricted volume types "
            "(volume \"nvidia\" uses restricted volume type \"hostPath\")");

  json added = BarePod();
  added["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
      json::array({"NET_ADMIN", "CHOWN"});
  EXPECT_EQ(PodSecurityViolation("baseline:latest", added),
            "violates PodSecurity \"baseline:latest\": non-default capabilities (container "
            "\"bad\" must not include \"NET_ADMIN\" in securityContext.capabilities.add)");
}

}  // namespace
}  // namespace kubetrain::fake_apiserver
