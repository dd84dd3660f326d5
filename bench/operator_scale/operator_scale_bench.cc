// operator_scale_bench: the real kubetrain-operator (child process) against
// the in-process fake API server.
//
//   operator_scale_bench [--jobs 1000] [--qps 500] [--burst 1000] [--workers 4]
//
// 1. start the operator and wait until its informers watch;
// 2. create N STANDARD_1 TrainingJobs (8 replicas each) as fast as the store takes them;
// 3. wait until all 8N pods exist; report the time from the last create,
//    API requests per job by verb, writes per pod, and the operator's peak RSS
//    (VmHWM from /proc) against the targets (< 60 s, < 100 MiB, <= 2 writes per
//    pod plus status writes).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace {

using kubetrain::fake_apiserver::FakeApiServer;
using nlohmann::json;

int64_t PeakRssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kib = 0;
      std::istringstream(line.substr(6)) >> kib;
      return kib;
    }
  }
  return -1;
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = std::atoi(Flag(argc, argv, "jobs", "1000").c_str());
  std::string qps = Flag(argc, argv, "qps", "500");
  std::string burst = Flag(argc, argv, "burst", "1000");
  std::string workers = Flag(argc, argv, "workers", "4");

  auto server = FakeApiServer::Start(FakeApiServer::Options{.bookmark_interval = absl::Seconds(5)});
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return 1;
  }
  char dir_template[] = "/tmp/operator_scale_XXXXXX";
  std::string dir = mkdtemp(dir_template);
  std::string kubeconfig = dir + "/kubeconfig";
  {
    std::ofstream out(kubeconfig);
    out << "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n"
        << "  cluster:\n    server: " << (*server)->url() << "\ncontexts:\n- name: fake\n"
        << "  context: {cluster: fake, namespace: bench}\n";
  }
  std::string log_path = dir + "/operator.log";
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    execl(KUBETRAIN_OPERATOR_BINARY, KUBETRAIN_OPERATOR_BINARY, "--kubeconfig", kubeconfig.c_str(),
          "--namespace", "bench", "--leader-elect=false", "--http-address=127.0.0.1:0", "--workers",
          workers.c_str(), "--kube-api-qps", qps.c_str(), "--kube-api-burst", burst.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for the operator's three watches (jobs, pods, services).
  for (int i = 0; i < 3000; ++i) {
    auto c = (*server)->RequestCounts();
    if (c["watch trainingjobs"] > 0 && c["watch pods"] > 0 && c["watch services"] > 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  (*server)->ResetRequestCounts();

  absl::Time first_create = absl::Now();
  for (int i = 0; i < jobs; ++i) {
    json job = {{"apiVersion", "kubetrain.io/v1"},
                {"kind", "TrainingJob"},
                {"metadata", {{"name", absl::StrCat("job-", i)}}},
                {"spec",
                 {{"trainingInput", {{"scaleTier", "STANDARD_1"}, {"args", {"--max_steps=10"}}}},
                  {"runPolicy", {{"restartPolicy", "OnFailure"}}}}}};
    auto created = (*server)->Create("trainingjobs", "bench", job);
    if (!created.ok()) {
      std::cerr << created.status() << "\n";
      return 1;
    }
  }
  absl::Time last_create = absl::Now();
  const size_t want = static_cast<size_t>(jobs) * 8;
  bool done =
      (*server)->WaitUntil([&] { return (*server)->Count("pods") >= want; }, absl::Seconds(600));
  absl::Time all_pods = absl::Now();
  // Let the status writes that follow the last creates land, then count.
  (*server)->WaitUntil(
      [&] {
        for (const json& j : (*server)->List("trainingjobs", "bench")) {
          if (!j.contains("status") || j["status"].value("state", "") != "PREPARING") return false;
        }
        return true;
      },
      absl::Seconds(120));
  absl::Time settled = absl::Now();
  int64_t rss_kib = PeakRssKiB(pid);
  kill(pid, SIGTERM);
  int status;
  waitpid(pid, &status, 0);

  auto counts = (*server)->RequestCounts();
  int64_t total = 0, writes = 0;
  for (const auto& [key, n] : counts) {
    total += n;
    if (key.rfind("create", 0) == 0 || key.rfind("update", 0) == 0 || key.rfind("patch", 0) == 0 ||
        key.rfind("delete", 0) == 0) {
      writes += n;
    }
  }
  double seconds = absl::ToDoubleSeconds(all_pods - last_create);
  double pod_writes = static_cast<double>(counts["create pods"] + counts["create services"]) / want;
  std::printf(
      "operator_scale: %d TrainingJobs x 8 replicas, --kube-api-qps %s --kube-api-burst %s "
      "--workers %s\n",
      jobs, qps.c_str(), burst.c_str(), workers.c_str());
  std::printf("  all %zu pods exist: %s\n", want, done ? "yes" : "NO (timed out)");
  std::printf("  creating the jobs took                 %8.2f s\n",
              absl::ToDoubleSeconds(last_create - first_create));
  std::printf(
      "  last create -> all pods                %8.2f s   (target < 60 s: %s, ratio %.2f)\n",
      seconds, seconds < 60 ? "met" : "MISSED", seconds / 60);
  std::printf("  last create -> every job PREPARING     %8.2f s\n",
              absl::ToDoubleSeconds(settled - last_create));
  std::printf(
      "  operator peak RSS                      %8.1f MiB (target < 100 MiB: %s, ratio %.2f)\n",
      rss_kib / 1024.0, rss_kib / 1024.0 < 100 ? "met" : "MISSED", rss_kib / 1024.0 / 100);
  std::printf("  API requests per job                   %8.2f   (writes %.2f)\n",
              static_cast<double>(total) / jobs, static_cast<double>(writes) / jobs);
  std::printf("  pod+service creates per pod            %8.2f   (target <= 2: %s)\n", pod_writes,
              pod_writes <= 2.0 ? "met" : "MISSED");
  for (const auto& [key, n] : counts) {
    std::printf("    %-28s %8lld  (%.2f per job)\n", key.c_str(), static_cast<long long>(n),
                static_cast<double>(n) / jobs);
  }
  std::printf("  operator log: %s\n", log_path.c_str());
  return done ? 0 : 1;
}
