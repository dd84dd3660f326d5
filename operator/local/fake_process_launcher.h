#pragma once

// A ProcessLauncher for tests: no processes, every replica's fate set by the
// test. Not thread-safe.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "operator/local/process_launcher.h"

namespace kubetrain::local {

class FakeProcessLauncher : public ProcessLauncher {
 public:
  struct Process {
    LaunchRequest request;
    ProcessStatus status;  // starts kRunning
    bool killed = false;
  };

  // Thrown by Launch, in place of a SIGKILL, when `kill_controller_at_launch`
  // holds for the request: the controller dies while it launches that
  // replica, before any process of it exists. The test drops the controller.
  struct ControllerKilled {};

  absl::StatusOr<ProcessId> Launch(const LaunchRequest& request) override {
    if (kill_controller_at_launch && kill_controller_at_launch(request)) {
      kill_controller_at_launch = nullptr;  // once
      throw ControllerKilled{};
    }
    if (fail_launches) return absl::UnavailableError("fake launch failure for " + request.name);
    const int pid = next_pid_++;
    Process& process = processes_[pid];
    process.request = request;
    process.status.state = ProcessStatus::State::kRunning;
    launched.push_back(request);
    return ProcessId{pid, static_cast<uint64_t>(pid) * 7};
  }
  ProcessStatus Probe(const ProcessId& id, const std::string&, const std::string&) override {
    auto it = processes_.find(id.pid);
    if (it == processes_.end()) return {};
    return it->second.status;
  }
  // Ends the process at once (exit code 143) unless its replica is in
  // `ignore_term`; a ForceKill ends it then (137).
  absl::Status Terminate(const ProcessId& id) override {
    auto it = processes_.find(id.pid);
    terminated_names.push_back(it == processes_.end() ? "" : it->second.request.name);
    if (it != processes_.end() && !ignore_term.contains(it->second.request.name))
      End(it->second, 143);
    return absl::OkStatus();
  }
  absl::Status ForceKill(const ProcessId& id) override {
    auto it = processes_.find(id.pid);
    force_killed_names.push_back(it == processes_.end() ? "" : it->second.request.name);
    if (it != processes_.end()) End(it->second, 137);
    return absl::OkStatus();
  }
  bool Alive(const ProcessId& id) override {
    auto it = processes_.find(id.pid);
    return it != processes_.end() && it->second.status.state == ProcessStatus::State::kRunning;
  }

  // The live process of replica `name`; nullptr when there is none.
  Process* Find(const std::string& name) {
    for (auto it = processes_.rbegin(); it != processes_.rend(); ++it) {
      if (it->second.request.name == name) return &it->second;
    }
    return nullptr;
  }
  // Ends the latest process of replica `name` with `code`.
  void Exit(const std::string& name, int code) {
    Process* process = Find(name);
    if (process == nullptr) return;
    process->status.state = ProcessStatus::State::kExited;
    process->status.exit_code = code;
  }
  // Names of processes still running.
  std::vector<std::string> Running() const {
    std::vector<std::string> names;
    for (const auto& [pid, process] : processes_) {
      if (process.status.state == ProcessStatus::State::kRunning)
        names.push_back(process.request.name);
    }
    return names;
  }

  std::vector<LaunchRequest> launched;
  std::vector<std::string> terminated_names;    // per Terminate call
  std::vector<std::string> force_killed_names;  // per ForceKill call
  std::set<std::string> ignore_term;            // replicas that outlive SIGTERM
  bool fail_launches = false;
  std::function<bool(const LaunchRequest&)> kill_controller_at_launch;

 private:
  static void End(Process& process, int code) {
    if (process.status.state != ProcessStatus::State::kRunning) return;
    process.status.state = ProcessStatus::State::kExited;
    process.status.exit_code = code;
    process.killed = true;
  }

  int next_pid_ = 1000;
  std::map<int, Process> processes_;
};

}  // namespace kubetrain::local
