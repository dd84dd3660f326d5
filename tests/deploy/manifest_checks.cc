#include "tests/deploy/manifest_checks.h"

#include <stdio.h>
#include <sys/wait.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#ifndef KUBETRAIN_SOURCE_DIR
#error "KUBETRAIN_SOURCE_DIR must name the repository root"
#endif
#ifndef KUBETRAIN_VERSION
#error "KUBETRAIN_VERSION must be project(VERSION)"
#endif

namespace kubetrain::deploy_testing {
namespace {

bool IsTrue(const YAML::Node& node) {
  return node && node.IsScalar() && node.as<std::string>() == "true";
}

std::string Str(const YAML::Node& node) {
  return node && node.IsScalar() ? node.as<std::string>() : std::string();
}

}  // namespace

std::string SourcePath(const std::string& relative) {
  return absl::StrCat(KUBETRAIN_SOURCE_DIR, "/", relative);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::vector<YAML::Node>> ParseDocuments(const std::string& text) {
  std::vector<YAML::Node> out;
  try {
    for (YAML::Node& doc : YAML::LoadAll(text)) {
      if (doc && !doc.IsNull()) out.push_back(doc);
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("YAML: ", e.what()));
  }
  return out;
}

std::string DefaultImageArg(const YAML::Node& deployment) {
  const YAML::Node containers = deployment["spec"]["template"]["spec"]["containers"];
  if (!containers || !containers.IsSequence() || containers.size() == 0) return "";
  for (const auto& arg : containers[0]["args"]) {
    const std::string text = Str(arg);
    absl::string_view value = text;
    if (absl::ConsumePrefix(&value, "--default-image=")) return std::string(value);
  }
  return "";
}

std::string ProjectVersion() { return KUBETRAIN_VERSION; }

std::string VersionedRuntimeImage() {
  return absl::StrCat("kubetrain/kubetrain-runtime:", KUBETRAIN_VERSION);
}

std::vector<std::string> OperatorDeploymentProblems(const YAML::Node& deployment,
                                                    int expected_replicas) {
  std::vector<std::string> problems;
  auto want = [&](bool ok, const std::string& what) {
    if (!ok) problems.push_back(what);
  };
  want(Str(deployment["kind"]) == "Deployment", "kind is not Deployment");
  want(Str(deployment["spec"]["replicas"]) == std::to_string(expected_replicas),
       absl::StrCat("spec.replicas is not ", expected_replicas));
  const YAML::Node pod = deployment["spec"]["template"]["spec"];
  if (!pod || !pod["containers"] || !pod["containers"].IsSequence() ||
      pod["containers"].size() != 1) {
    problems.push_back("spec.template.spec.containers: want exactly one container");
    return problems;
  }
  const YAML::Node container = pod["containers"][0];

  // Leader election, when more than one replica runs.
  bool leader_elect = false;
  for (const auto& arg : container["args"]) {
    if (Str(arg) == "--leader-elect=true") leader_elect = true;
  }
  want(expected_replicas <= 1 || leader_elect, "args: --leader-elect=true missing");

  // Probes on the port the container serves.
  std::set<std::string> port_names;
  for (const auto& port : container["ports"]) port_names.insert(Str(port["name"]));
  auto check_probe = [&](const char* probe, const char* path) {
    const YAML::Node get = container[probe]["httpGet"];
    want(Str(get["path"]) == path, absl::StrCat(probe, ".httpGet.path is not ", path));
    want(port_names.count(Str(get["port"])) > 0,
         absl::StrCat(probe, ".httpGet.port does not name a container port"));
  };
  check_probe("livenessProbe", "/healthz");
  check_probe("readinessProbe", "/readyz");

  want(container["resources"]["requests"]["cpu"] && container["resources"]["requests"]["memory"],
       "resources.requests: cpu and memory");

  // Least privilege.
  const YAML::Node pod_sc = pod["securityContext"];
  const YAML::Node sc = container["securityContext"];
  want(IsTrue(sc["runAsNonRoot"]) || IsTrue(pod_sc["runAsNonRoot"]), "runAsNonRoot: true missing");
  want(Str(pod_sc["runAsUser"]) != "0" && Str(sc["runAsUser"]) != "0", "runs as uid 0");
  want(IsTrue(sc["readOnlyRootFilesystem"]), "readOnlyRootFilesystem: true missing");
  want(Str(sc["allowPrivilegeEscalation"]) == "false", "allowPrivilegeEscalation: false missing");
  want(!IsTrue(sc["privileged"]), "privileged container");
  bool drops_all = false;
  for (const auto& cap : sc["capabilities"]["drop"]) drops_all |= Str(cap) == "ALL";
  want(drops_all, "capabilities.drop: [ALL] missing");
  want(!sc["capabilities"]["add"], "capabilities.add present");
  want(Str(sc["seccompProfile"]["type"]) == "RuntimeDefault" ||
           Str(pod_sc["seccompProfile"]["type"]) == "RuntimeDefault",
       "seccompProfile RuntimeDefault missing");
  want(!IsTrue(pod["hostNetwork"]) && !IsTrue(pod["hostPID"]) && !IsTrue(pod["hostIPC"]),
       "host namespaces shared");
  want(!Str(pod["serviceAccountName"]).empty(), "serviceAccountName missing");
  // The operator talks to the API server with its account's token; the
  // account itself does not automount it, so the pod opts in explicitly.
  want(IsTrue(pod["automountServiceAccountToken"]), "automountServiceAccountToken: true missing");
  return problems;
}

absl::StatusOr<std::string> RulesOf(const std::vector<YAML::Node>& documents,
                                    const std::string& kind, const std::string& name) {
  for (const YAML::Node& doc : documents) {
    if (Str(doc["kind"]) != kind) continue;
    if (!name.empty() && Str(doc["metadata"]["name"]) != name) continue;
    YAML::Emitter out;
    out << doc["rules"];
    return std::string(out.c_str());
  }
  return absl::NotFoundError(absl::StrCat("no ", kind, " ", name));
}

CommandResult RunCommand(const std::string& command_line) {
  CommandResult result;
  FILE* pipe = popen((command_line + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

bool OnPath(const std::string& program) {
  return RunCommand("command -v " + program + " >/dev/null").exit_code == 0;
}

}  // namespace kubetrain::deploy_testing
