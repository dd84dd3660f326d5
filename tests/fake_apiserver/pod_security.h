#pragma once

#include <map>
#include <optional>
#include <string>

#include "nlohmann/json.hpp"

namespace kubetrain::fake_apiserver {

// The Pod Security admission of kube-apiserver (the Pod Security Standards'
// "baseline" and "restricted" levels), as the fake API server applies it to
// pods created in a labelled namespace. Pure: labels and a pod in, the
// refusal's words out.
//
// The namespace's `pod-security.kubernetes.io/enforce` label picks the level
// ("privileged", "baseline" or "restricted"; a value that is none of them is
// enforced as restricted, as the real admission does), and
// `pod-security.kubernetes.io/enforce-version` the version it is named with
// ("v1.N"; "latest" when absent or not a version; every version is checked
// by today's rules).
//
// Checks, in the order the real admission reports them (baseline's, then
// restricted's, each by check name; a restricted check replaces the baseline
// check of the same subject):
//   baseline    non-default capabilities, host namespaces, hostPath volumes,
//               hostPort, privileged, seccompProfile (Unconfined)
//   restricted  allowPrivilegeEscalation != false, unrestricted capabilities,
//               restricted volume types, runAsNonRoot != true, runAsUser=0,
//               seccompProfile (RuntimeDefault or Localhost required)
// over every container and init container. Not checked: AppArmor, SELinux
// options, procMount, sysctls, Windows host processes, and the exemptions a
// cluster's AdmissionConfiguration may grant.

inline constexpr char kPodSecurityEnforceLabel[] = "pod-security.kubernetes.io/enforce";
inline constexpr char kPodSecurityEnforceVersionLabel[] =
    "pod-security.kubernetes.io/enforce-version";

// The policy a namespace's labels enforce: "restricted:latest",
// "baseline:v1.30"; nullopt when they enforce none (no label, or
// "privileged").
std::optional<std::string> EnforcedPodSecurityPolicy(
    const std::map<std::string, std::string>& namespace_labels);

// Why `policy` ("LEVEL:VERSION", as EnforcedPodSecurityPolicy returns it)
// refuses `pod`, in the admission's words: `violates PodSecurity
// "restricted:latest": runAsNonRoot != true (pod or container "kubetrain"
// must set securityContext.runAsNonRoot=true), ...`; nullopt when it
// admits it.
std::optional<std::string> PodSecurityViolation(const std::string& policy,
                                                const nlohmann::json& pod);

}  // namespace kubetrain::fake_apiserver
