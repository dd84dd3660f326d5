#pragma once

// What a kubelet does with the pods the operator creates on the fake API
// server, done with processes on this machine: each pod's training container
// runs as a process of the command, args and environment the operator
// rendered, and its status goes back to the server as a kubelet reports it.
// Volumes backed by claims (and emptyDirs, a folder per pod) are "mounted" by
// rewriting their mount path to a host folder in every argument and
// environment value, and Service addresses are "resolved" to a port of this
// machine per pod (PortOf). A container without a command runs its image's
// entrypoint, as the test says it is on this machine; a native sidecar (an
// init container with restartPolicy Always) runs beside the pod's container
// and is stopped with SIGTERM once it has ended, before the pod's phase says
// so.

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/testing/child_process.h"
#include "nlohmann/json.hpp"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::testing {

class StandInKubelet {
 public:
  // `claim_folders`: claim name -> the host folder that holds its contents.
  // `entrypoints`: image -> the command its ENTRYPOINT is on this machine.
  explicit StandInKubelet(std::map<std::string, std::string> claim_folders,
                          std::map<std::string, std::vector<std::string>> entrypoints = {});
  // Stops RunPods and kills every container it runs.
  ~StandInKubelet();
  StandInKubelet(const StandInKubelet&) = delete;
  StandInKubelet& operator=(const StandInKubelet&) = delete;

  // Starts the pod's container once; its output goes to `log`. Returns the
  // process (killed when destroyed), or nullptr (with a test failure) when
  // the pod cannot be run: a volume nothing backs.
  std::unique_ptr<test_support::ChildProcess> Start(const nlohmann::json& pod,
                                                    const std::string& log,
                                                    const std::string& working_dir);
  // The same for one container of the pod (its training container, or a
  // sidecar).
  std::unique_ptr<test_support::ChildProcess> StartContainer(const nlohmann::json& pod,
                                                             const nlohmann::json& container,
                                                             const std::string& log,
                                                             const std::string& working_dir);

  // From now on runs every pod of `ns` on `server` as a kubelet does, on a
  // thread of its own: a new pod's container starts (phase Running, its
  // startedAt); one that exits 0 makes the pod Succeeded; one that fails is
  // run again in place after `restart_delay` under restartPolicy OnFailure
  // or Always (restartCount, lastState, waiting CrashLoopBackOff meanwhile),
  // else the pod Failed; a pod deleted, or replaced by one of the same name,
  // has its container killed. Times are whole seconds, as a kubelet's. Each
  // pod's output, every run of it, is appended to `<log_dir>/<pod>.log`;
  // containers run in `<log_dir>/<pod>.cwd`, emptied for a new pod of the
  // same name (its emptyDirs with it), kept across restarts in place.
  void RunPods(fake_apiserver::FakeApiServer* server, std::string ns, std::string log_dir,
               absl::Duration restart_delay = absl::Seconds(1));

  // The process of the pod's container while it runs (RunPods); 0 when none.
  int Pid(const std::string& pod) const;

  // The port of this machine that stands for the pod's Service address
  // ("<pod>.<namespace>.svc:<port>" in its arguments and environment): one
  // per pod name, free when first given out and no other pod's.
  int PortOf(const std::string& pod);

 private:
  struct Container;
  void Loop(fake_apiserver::FakeApiServer* server, const std::string& ns,
            const std::string& log_dir, absl::Duration restart_delay);

  const std::map<std::string, std::string> claim_folders_;
  const std::map<std::string, std::vector<std::string>> entrypoints_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, int> pids_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> ports_ ABSL_GUARDED_BY(mu_);
  std::thread loop_;
};

}  // namespace kubetrain::testing
