#include "tests/operator/stand_in_kubelet.h"

#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "operator/local/controller.h"

namespace kubetrain::testing {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A kubelet's time: RFC 3339 in whole seconds, UTC.
std::string KubeletTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

}  // namespace

StandInKubelet::StandInKubelet(std::map<std::string, std::string> claim_folders,
                               std::map<std::string, std::vector<std::string>> entrypoints)
    : claim_folders_(std::move(claim_folders)), entrypoints_(std::move(entrypoints)) {}

StandInKubelet::~StandInKubelet() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (loop_.joinable()) loop_.join();
}

std::unique_ptr<test_support::ChildProcess> StandInKubelet::Start(const json& pod,
                                                                  const std::string& log,
                                                                  const std::string& working_dir) {
  return StartContainer(pod, pod["spec"]["containers"][0], log, working_dir);
}

std::unique_ptr<test_support::ChildProcess> StandInKubelet::StartContainer(
    const json& pod, const json& container, const std::string& log,
    const std::string& working_dir) {
  std::vector<std::pair<std::string, std::string>> mounts;  // mount path -> host folder
  for (const json& mount : container.value("volumeMounts", json::array())) {
    std::string claim;
    bool empty_dir = false;
    for (const json& volume : pod["spec"].value("volumes", json::array())) {
      if (volume["name"] != mount["name"]) continue;
      if (volume.contains("persistentVolumeClaim")) {
        claim = volume["persistentVolumeClaim"]["claimName"];
      }
      empty_dir = volume.contains("emptyDir");
    }
    std::string host;
    if (empty_dir) {
      // The pod's own, shared by its containers.
      host = absl::StrCat(working_dir, "/.volumes/", mount["name"].get<std::string>());
    } else if (auto folder = claim_folders_.find(claim); folder != claim_folders_.end()) {
      host = folder->second;
    } else {
      ADD_FAILURE() << "nothing backs volume " << mount["name"] << " of "
                    << pod["metadata"]["name"];
      return nullptr;
    }
    if (mount.contains("subPath")) host += "/" + mount["subPath"].get<std::string>();
    fs::create_directories(host);  // the kubelet makes a missing subPath
    mounts.emplace_back(mount["mountPath"], host);
  }
  const std::regex service(absl::StrCat(R"(([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.)",
                                        pod["metadata"].value("namespace", ""),
                                        R"(\.svc(\.cluster\.local)?:[0-9]+)"));
  auto rewrite = [&](std::string value) {
    for (const auto& [path, host] : mounts) {
      for (size_t at = value.find(path); at != std::string::npos; at = value.find(path, at)) {
        const size_t end = at + path.size();
        const bool starts_path = at == 0 || value[at - 1] == '=' || value[at - 1] == ',';
        const bool ends_path = end == value.size() || value[end] == '/' || value[end] == ',';
        if (starts_path && ends_path) {
          value.replace(at, path.size(), host);
          at += host.size();
        } else {
          at = end;
        }
      }
    }
    // The cluster's DNS and each pod's network of its own: a Service name
    // ("<pod>.<namespace>.svc:<port>") is a port of this machine, one per pod
    // name, kept when the pod is created again.
    std::string resolved;
    size_t copied = 0;
    for (std::sregex_iterator it(value.begin(), value.end(), service), end; it != end; ++it) {
      resolved += value.substr(copied, it->position() - copied);
      resolved += absl::StrCat("127.0.0.1:", PortOf((*it)[1]));
      copied = it->position() + it->length();
    }
    return resolved + value.substr(copied);
  };
  std::vector<std::string> argv;
  if (container.contains("command")) {
    for (const json& part : container["command"]) argv.push_back(rewrite(part));
  } else if (auto entrypoint = entrypoints_.find(container.value("image", ""));
             entrypoint != entrypoints_.end()) {
    argv = entrypoint->second;
  } else {
    ADD_FAILURE() << "no command, and no entrypoint known for image "
                  << container.value("image", "") << ": " << container.dump();
    return nullptr;
  }
  for (const json& part : container.value("args", json::array())) argv.push_back(rewrite(part));
  // The image's kubetrain-runtime is the one under test.
  if (!argv.empty() && argv[0] == "kubetrain-runtime") argv[0] = KUBETRAIN_RUNTIME_BINARY;
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "OPENBLAS_NUM_THREADS=1"};
  if (const char* core = std::getenv("OPENBLAS_CORETYPE")) {
    env.push_back(absl::StrCat("OPENBLAS_CORETYPE=", core));
  }
  for (const json& var : container.value("env", json::array())) {
    env.push_back(
        absl::StrCat(var["name"].get<std::string>(), "=", rewrite(var.value("value", ""))));
  }
  auto child = test_support::ChildProcess::Spawn(
      {.argv = argv, .output_path = log, .append_output = true, .env = env, .cwd = working_dir});
  if (!child.ok()) {
    ADD_FAILURE() << child.status();
    return nullptr;
  }
  return *std::move(child);
}

// One pod's container as RunPods keeps it.
struct StandInKubelet::Container {
  std::string uid;
  std::unique_ptr<test_support::ChildProcess> process;                // null between runs
  std::vector<std::unique_ptr<test_support::ChildProcess>> sidecars;  // while the pod runs
  absl::Time started;
  int restarts = 0;
  json last_terminated;  // the run before this one
  absl::Time start_at = absl::InfinitePast();
  bool done = false;  // Succeeded or Failed
};

void StandInKubelet::RunPods(fake_apiserver::FakeApiServer* server, std::string ns,
                             std::string log_dir, absl::Duration restart_delay) {
  loop_ = std::thread([this, server, ns = std::move(ns), log_dir = std::move(log_dir),
                       restart_delay] { Loop(server, ns, log_dir, restart_delay); });
}

int StandInKubelet::PortOf(const std::string& pod) {
  absl::MutexLock lock(&mu_);
  int& port = ports_[pod];
  // A port bound and released may be the kernel's next pick as well: draw
  // again until it is not another pod's.
  for (int draw = 0; port == 0 && draw < 100; ++draw) {
    absl::StatusOr<int> free = local::PickFreePort();
    EXPECT_TRUE(free.ok()) << pod << ": " << free.status();
    if (!free.ok()) break;
    bool taken = false;
    for (const auto& [other, other_port] : ports_) taken = taken || other_port == *free;
    if (!taken) port = *free;
  }
  EXPECT_NE(port, 0) << pod << ": no port that no other pod has";
  return port;
}

int StandInKubelet::Pid(const std::string& pod) const {
  absl::MutexLock lock(&mu_);
  auto it = pids_.find(pod);
  return it == pids_.end() ? 0 : it->second;
}

void StandInKubelet::Loop(fake_apiserver::FakeApiServer* server, const std::string& ns,
                          const std::string& log_dir, absl::Duration restart_delay) {
  std::map<std::string, Container> containers;  // by pod name
  auto report = [&](const std::string& pod, const Container& c, const std::string& phase,
                    const json& state) {
    json status = {{"name", "kubetrain"}, {"restartCount", c.restarts}, {"state", state}};
    if (!c.last_terminated.is_null()) status["lastState"] = {{"terminated", c.last_terminated}};
    // The pod may be gone already: nothing to report then.
    (void)server->MergePatch("pods", ns, pod,
                             {{"status", {{"phase", phase}, {"containerStatuses", {status}}}}},
                             "status");
  };
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    std::set<std::string> present;
    for (const json& pod : server->List("pods", ns)) {
      const std::string name = pod["metadata"]["name"];
      const std::string uid = pod["metadata"]["uid"];
      present.insert(name);
      auto it = containers.find(name);
      if (it != containers.end() && it->second.uid != uid) {
        containers.erase(it);  // replaced by a new pod: the old container is killed
        it = containers.end();
      }
      if (it == containers.end()) {
        // A new pod gets a container filesystem and emptyDirs of its own,
        // empty, even where it has an earlier pod's name (restarts in place
        // keep them).
        std::error_code ignored;
        fs::remove_all(absl::StrCat(log_dir, "/", name, ".cwd"), ignored);
        it = containers.emplace(name, Container{.uid = uid}).first;
      }
      Container& c = it->second;
      if (c.done) continue;
      const absl::Time now = absl::Now();
      if (c.process == nullptr && now >= c.start_at) {
        const std::string cwd = absl::StrCat(log_dir, "/", name, ".cwd");
        fs::create_directories(cwd);
        // Native sidecars first, once: they run beside every run of the container.
        if (c.restarts == 0) {
          for (const json& init : pod["spec"].value("initContainers", json::array())) {
            if (init.value("restartPolicy", "") != "Always") continue;
            c.sidecars.push_back(StartContainer(
                pod, init, absl::StrCat(log_dir, "/", name, ".", init.value("name", ""), ".log"),
                cwd));
          }
        }
        c.process = Start(pod, absl::StrCat(log_dir, "/", name, ".log"), cwd);
        if (c.process == nullptr) {
          c.done = true;
          report(name, c, "Failed",
                 {{"terminated", {{"exitCode", 128}, {"reason", "ContainerCannotRun"}}}});
          continue;
        }
        c.started = now;
        report(name, c, "Running", {{"running", {{"startedAt", KubeletTime(now)}}}});
      } else if (c.process != nullptr && c.process->Exited()) {
        const int code = c.process->exit_code().value_or(1);
        c.process.reset();
        const json terminated = {{"exitCode", code},
                                 {"reason", code == 0 ? "Completed" : "Error"},
                                 {"startedAt", KubeletTime(c.started)},
                                 {"finishedAt", KubeletTime(now)}};
        const std::string policy = pod["spec"].value("restartPolicy", "Always");
        const bool ends = code == 0 || (policy != "OnFailure" && policy != "Always");
        if (ends) {
          // The pod's container has ended for good: its sidecars are
          // stopped, as a kubelet does, before the pod's phase says so.
          for (auto& sidecar : c.sidecars) {
            if (sidecar != nullptr && sidecar->running()) sidecar->SignalAndWait(SIGTERM);
          }
        }
        if (code == 0) {
          c.done = true;
          report(name, c, "Succeeded", {{"terminated", terminated}});
        } else if (policy == "OnFailure" || policy == "Always") {
          ++c.restarts;
          c.last_terminated = terminated;
          c.start_at = now + restart_delay;
          report(name, c, "Running", {{"waiting", {{"reason", "CrashLoopBackOff"}}}});
        } else {
          c.done = true;
          report(name, c, "Failed", {{"terminated", terminated}});
        }
      }
    }
    // Pods deleted: their containers are killed (destroying the process).
    std::erase_if(containers, [&](const auto& entry) { return !present.count(entry.first); });
    {
      absl::MutexLock lock(&mu_);
      pids_.clear();
      for (const auto& [name, c] : containers) {
        if (c.process != nullptr && c.process->running()) pids_[name] = c.process->pid();
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

}  // namespace kubetrain::testing
