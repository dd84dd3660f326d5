#include "tests/fake_apiserver/pod_security.h"

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kubetrain::fake_apiserver {
// Its own namespace: the fake server's sources share unity batches.
namespace pod_security {
namespace {

using nlohmann::json;

struct Violation {
  std::string reason;
  std::string detail;
};
using Check = std::function<std::optional<Violation>(const json& spec)>;

const json& Member(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

const json& SecurityContext(const json& object) { return Member(object, "securityContext"); }

std::string Text(const json& value) { return value.is_string() ? value.get<std::string>() : ""; }

// Init containers, containers, ephemeral containers: the admission's order.
void ForEachContainer(const json& spec, const std::function<void(const json&)>& visit) {
  for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
    const json& containers = Member(spec, list);
    if (!containers.is_array()) continue;
    for (const json& container : containers) visit(container);
  }
}

std::string Plural(const char* one, const char* many, size_t n) { return n == 1 ? one : many; }

template <typename Range>
std::string JoinQuoted(const Range& items) {
  std::vector<std::string> quoted;
  for (const auto& item : items) quoted.push_back(absl::StrCat("\"", item, "\""));
  return absl::StrJoin(quoted, ", ");
}

std::string Containers(const std::vector<std::string>& names) {
  return absl::StrCat(Plural("container", "containers", names.size()), " ", JoinQuoted(names));
}

// ---- baseline -----------------------------------------------------------

std::optional<Violation> BaselineCapabilities(const json& spec) {
  static const std::set<std::string> kAllowed = {
      "AUDIT_WRITE",      "CHOWN",   "DAC_OVERRIDE", "FOWNER",  "FSETID", "KILL",      "MKNOD",
      "NET_BIND_SERVICE", "SETFCAP", "SETGID",       "SETPCAP", "SETUID", "SYS_CHROOT"};
  std::vector<std::string> containers;
  std::set<std::string> added;
  ForEachContainer(spec, [&](const json& c) {
    bool bad = false;
    const json& add = Member(Member(SecurityContext(c), "capabilities"), "add");
    if (!add.is_array()) return;
    for (const json& capability : add) {
      if (kAllowed.count(Text(capability)) == 0) {
        bad = true;
        added.insert(Text(capability));
      }
    }
    if (bad) containers.push_back(Text(Member(c, "name")));
  });
  if (containers.empty()) return std::nullopt;
  return Violation{"non-default capabilities",
                   absl::StrCat(Containers(containers), " must not include ", JoinQuoted(added),
                                " in securityContext.capabilities.add")};
}

std::optional<Violation> HostNamespaces(const json& spec) {
  std::vector<std::string> set;
  for (const char* field : {"hostNetwork", "hostPID", "hostIPC"}) {
    if (Member(spec, field) == true) set.push_back(absl::StrCat(field, "=true"));
  }
  if (set.empty()) return std::nullopt;
  return Violation{"host namespaces", absl::StrJoin(set, ", ")};
}

std::optional<Violation> HostPathVolumes(const json& spec) {
  std::vector<std::string> volumes;
  const json& all = Member(spec, "volumes");
  if (all.is_array()) {
    for (const json& v : all) {
      if (!Member(v, "hostPath").is_null()) volumes.push_back(Text(Member(v, "name")));
    }
  }
  if (volumes.empty()) return std::nullopt;
  return Violation{"hostPath volumes", absl::StrCat(Plural("volume", "volumes", volumes.size()),
                                                    " ", JoinQuoted(volumes))};
}

std::optional<Violation> HostPorts(const json& spec) {
  std::vector<std::string> containers;
  std::set<std::string> ports;  // as the admission's string set: once each, sorted as text
  ForEachContainer(spec, [&](const json& c) {
    bool bad = false;
    const json& list = Member(c, "ports");
    if (!list.is_array()) return;
    for (const json& port : list) {
      const json& host_port = Member(port, "hostPort");
      if (host_port.is_number_integer() && host_port.get<int64_t>() != 0) {
        bad = true;
        ports.insert(std::to_string(host_port.get<int64_t>()));
      }
    }
    if (bad) containers.push_back(Text(Member(c, "name")));
  });
  if (containers.empty()) return std::nullopt;
  return Violation{
      "hostPort",
      absl::StrCat(Containers(containers), " ", Plural("uses", "use", containers.size()), " ",
                   Plural("hostPort", "hostPorts", ports.size()), " ", absl::StrJoin(ports, ", "))};
}

std::optional<Violation> Privileged(const json& spec) {
  std::vector<std::string> containers;
  ForEachContainer(spec, [&](const json& c) {
    if (Member(SecurityContext(c), "privileged") == true) {
      containers.push_back(Text(Member(c, "name")));
    }
  });
  if (containers.empty()) return std::nullopt;
  return Violation{"privileged", absl::StrCat(Containers(containers),
                                              " must not set securityContext.privileged=true")};
}

std::string SeccompType(const json& object) {
  return Text(Member(Member(SecurityContext(object), "seccompProfile"), "type"));
}

std::optional<Violation> BaselineSeccomp(const json& spec) {
  std::vector<std::string> setters;
  if (SeccompType(spec) == "Unconfined") setters.push_back("pod");
  std::vector<std::string> containers;
  ForEachContainer(spec, [&](const json& c) {
    if (SeccompType(c) == "Unconfined") containers.push_back(Text(Member(c, "name")));
  });
  if (!containers.empty()) setters.push_back(Containers(containers));
  if (setters.empty()) return std::nullopt;
  return Violation{"seccompProfile",
                   absl::StrCat(absl::StrJoin(setters, " and "),
                                " must not set securityContext.seccompProfile.type to "
                                "\"Unconfined\"")};
}

// ---- restricted ---------------------------------------------------------

std::optional<Violation> AllowPrivilegeEscalation(const json& spec) {
  std::vector<std::string> containers;
  ForEachContainer(spec, [&](const json& c) {
    if (Member(SecurityContext(c), "allowPrivilegeEscalation") != false) {
      containers.push_back(Text(Member(c, "name")));
    }
  });
  if (containers.empty()) return std::nullopt;
  return Violation{"allowPrivilegeEscalation != false",
                   absl::StrCat(Containers(containers),
                                " must set securityContext.allowPrivilegeEscalation=false")};
}

std::optional<Violation> RestrictedCapabilities(const json& spec) {
  std::vector<std::string> missing_drop_all, adding;
  std::set<std::string> forbidden;
  ForEachContainer(spec, [&](const json& c) {
    const json& capabilities = Member(SecurityContext(c), "capabilities");
    bool drops_all = false;
    if (const json& drop = Member(capabilities, "drop"); drop.is_array()) {
      for (const json& d : drop) drops_all = drops_all || Text(d) == "ALL";
    }
    if (!drops_all) missing_drop_all.push_back(Text(Member(c, "name")));
    bool bad = false;
    if (const json& add = Member(capabilities, "add"); add.is_array()) {
      for (const json& a : add) {
        if (Text(a) != "NET_BIND_SERVICE") {
          bad = true;
          forbidden.insert(Text(a));
        }
      }
    }
    if (bad) adding.push_back(Text(Member(c, "name")));
  });
  std::vector<std::string> details;
  if (!missing_drop_all.empty()) {
    details.push_back(absl::StrCat(Containers(missing_drop_all),
                                   " must set securityContext.capabilities.drop=[\"ALL\"]"));
  }
  if (!adding.empty()) {
    details.push_back(absl::StrCat(Containers(adding), " must not include ", JoinQuoted(forbidden),
                                   " in securityContext.capabilities.add"));
  }
  if (details.empty()) return std::nullopt;
  return Violation{"unrestricted capabilities", absl::StrJoin(details, "; ")};
}

std::optional<Violation> RestrictedVolumes(const json& spec) {
  static const std::set<std::string> kAllowed = {"configMap", "csi",       "downwardAPI",
                                                 "emptyDir",  "ephemeral", "persistentVolumeClaim",
                                                 "projected", "secret"};
  std::vector<std::string> volumes;
  std::set<std::string> types;
  const json& all = Member(spec, "volumes");
  if (!all.is_array()) return std::nullopt;
  for (const json& v : all) {
    if (!v.is_object()) continue;
    std::string type = "unknown";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() != "name") type = it.key();
    }
    if (kAllowed.count(type) > 0) continue;
    volumes.push_back(Text(Member(v, "name")));
    types.insert(type);
  }
  if (volumes.empty()) return std::nullopt;
  return Violation{
      "restricted volume types",
      absl::StrCat(Plural("volume", "volumes", volumes.size()), " ", JoinQuoted(volumes), " ",
                   Plural("uses", "use", volumes.size()), " ",
                   Plural("restricted volume type", "restricted volume types", types.size()), " ",
                   JoinQuoted(types))};
}

std::optional<Violation> RunAsNonRoot(const json& spec) {
  const json& pod_value = Member(SecurityContext(spec), "runAsNonRoot");
  std::vector<std::string> setters;
  if (pod_value == false) setters.push_back("pod");
  const bool pod_non_root = pod_value == true;
  std::vector<std::string> explicitly_bad, implicitly_bad;
  ForEachContainer(spec, [&](const json& c) {
    const json& value = Member(SecurityContext(c), "runAsNonRoot");
    if (value.is_boolean()) {
      if (!value.get<bool>()) explicitly_bad.push_back(Text(Member(c, "name")));
    } else if (!pod_non_root) {
      implicitly_bad.push_back(Text(Member(c, "name")));
    }
  });
  if (!explicitly_bad.empty()) setters.push_back(Containers(explicitly_bad));
  if (!setters.empty()) {
    return Violation{"runAsNonRoot != true",
                     absl::StrCat(absl::StrJoin(setters, " and "),
                                  " must not set securityContext.runAsNonRoot=false")};
  }
  if (implicitly_bad.empty()) return std::nullopt;
  return Violation{"runAsNonRoot != true",
                   absl::StrCat("pod or ", Containers(implicitly_bad),
                                " must set securityContext.runAsNonRoot=true")};
}

std::optional<Violation> RunAsUser(const json& spec) {
  auto is_root = [](const json& object) {
    const json& uid = Member(SecurityContext(object), "runAsUser");
    return uid.is_number_integer() && uid.get<int64_t>() == 0;
  };
  std::vector<std::string> setters;
  if (is_root(spec)) setters.push_back("pod");
  std::vector<std::string> containers;
  ForEachContainer(spec, [&](const json& c) {
    if (is_root(c)) containers.push_back(Text(Member(c, "name")));
  });
  if (!containers.empty()) setters.push_back(Containers(containers));
  if (setters.empty()) return std::nullopt;
  return Violation{"runAsUser=0",
                   absl::StrCat(absl::StrJoin(setters, " and "), " must not set runAsUser=0")};
}

std::optional<Violation> RestrictedSeccomp(const json& spec) {
  auto valid = [](const std::string& type) {
    return type == "RuntimeDefault" || type == "Localhost";
  };
  auto has_profile = [](const json& object) {
    return !Member(SecurityContext(object), "seccompProfile").is_null();
  };
  std::vector<std::string> setters;
  std::set<std::string> bad_values;
  bool pod_set = false;
  if (has_profile(spec)) {
    if (valid(SeccompType(spec))) {
      pod_set = true;
    } else {
      setters.push_back("pod");
      bad_values.insert(SeccompType(spec));
    }
  }
  std::vector<std::string> explicitly_bad, implicitly_bad;
  ForEachContainer(spec, [&](const json& c) {
    if (has_profile(c)) {
      if (!valid(SeccompType(c))) {
        explicitly_bad.push_back(Text(Member(c, "name")));
        bad_values.insert(SeccompType(c));
      }
    } else if (!pod_set) {
      implicitly_bad.push_back(Text(Member(c, "name")));
    }
  });
  if (!explicitly_bad.empty()) setters.push_back(Containers(explicitly_bad));
  if (!setters.empty()) {
    return Violation{"seccompProfile",
                     absl::StrCat(absl::StrJoin(setters, " and "),
                                  " must not set securityContext.seccompProfile.type to ",
                                  JoinQuoted(bad_values))};
  }
  if (implicitly_bad.empty()) return std::nullopt;
  return Violation{"seccompProfile",
                   absl::StrCat("pod or ", Containers(implicitly_bad),
                                " must set securityContext.seccompProfile.type to "
                                "\"RuntimeDefault\" or \"Localhost\"")};
}

}  // namespace
}  // namespace pod_security

std::optional<std::string> EnforcedPodSecurityPolicy(
    const std::map<std::string, std::string>& namespace_labels) {
  auto level = namespace_labels.find(kPodSecurityEnforceLabel);
  if (level == namespace_labels.end() || level->second == "privileged") return std::nullopt;
  // A version that is not "latest" or "v1.N" is enforced as latest.
  auto version = namespace_labels.find(kPodSecurityEnforceVersionLabel);
  std::string named = "latest";
  if (version != namespace_labels.end() && absl::StartsWith(version->second, "v1.")) {
    int minor = 0;
    if (absl::SimpleAtoi(version->second.substr(3), &minor) && minor >= 0) named = version->second;
  }
  return absl::StrCat(level->second == "baseline" ? "baseline" : "restricted", ":", named);
}

std::optional<std::string> PodSecurityViolation(const std::string& policy,
                                                const nlohmann::json& pod) {
  using namespace pod_security;
  std::vector<Check> checks;
  const bool restricted = policy.rfind("restricted:", 0) == 0;
  // Baseline's checks, less those a restricted check replaces.
  if (!restricted) checks.push_back(BaselineCapabilities);
  checks.push_back(HostNamespaces);
  if (!restricted) checks.push_back(HostPathVolumes);
  checks.push_back(HostPorts);
  checks.push_back(Privileged);
  if (!restricted) checks.push_back(BaselineSeccomp);
  if (restricted) {
    for (const Check& check :
         {Check(AllowPrivilegeEscalation), Check(RestrictedCapabilities), Check(RestrictedVolumes),
          Check(RunAsNonRoot), Check(RunAsUser), Check(RestrictedSeccomp)}) {
      checks.push_back(check);
    }
  }
  const nlohmann::json& spec = Member(pod, "spec");
  std::vector<std::string> violations;
  for (const Check& check : checks) {
    if (std::optional<Violation> v = check(spec)) {
      violations.push_back(absl::StrCat(v->reason, " (", v->detail, ")"));
    }
  }
  if (violations.empty()) return std::nullopt;
  return absl::StrCat("violates PodSecurity \"", policy, "\": ", absl::StrJoin(violations, ", "));
}

}  // namespace kubetrain::fake_apiserver
