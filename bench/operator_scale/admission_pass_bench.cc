// admission_pass_bench: what one gang-admission pass costs on a busy shared
// cluster. The fake API server holds `--nodes` nodes (8 CPUs, 32 GiB each),
// all of them full (two "standard" pods bound on each, placed by the fake's
// scheduler), and `--jobs` STANDARD_1 TrainingJobs (8 replicas each) that
// cannot be admitted. kubetrain's GangAdmission (operator/kube) watches
// them through its real informers over HTTP, as in the operator.
//
//   admission_pass_bench [--jobs 1000] [--nodes 100] [--passes 20]
//
// Reports: the first pass (each job rendered once), then the CPU and wall
// time of one steady pass (the median of --passes), and the
// process's RSS before and after admission started (its caches: every pod,
// node, quota; each job's rendered gang).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "operator/core/tf_config.h"
#include "operator/kube/gang_admission.h"
#include "operator/kube/informer.h"
#include "operator/kube/rest_client.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace {

using kubetrain::fake_apiserver::FakeApiServer;
using nlohmann::json;

std::string Flag(int argc, char** argv, const std::string& name, const std::string& otherwise) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return otherwise;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

double RssMiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kib = 0;
      std::istringstream(line.substr(6)) >> kib;
      return static_cast<double>(kib) / 1024.0;
    }
  }
  return -1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = std::atoi(Flag(argc, argv, "jobs", "1000").c_str());
  const int nodes = std::atoi(Flag(argc, argv, "nodes", "100").c_str());
  const int passes = std::max(1, std::atoi(Flag(argc, argv, "passes", "20").c_str()));

  FakeApiServer::Options options;
  options.default_nodes = 0;  // the bench's own
  options.schedule_pods = true;
  auto server = FakeApiServer::Start(options);
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return 1;
  }
  for (int i = 0; i < nodes; ++i) {
    json node = {
        {"metadata", {{"name", absl::StrCat("node-", i)}}},
        {"status", {{"allocatable", {{"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}}}}}};
    if (!(*server)->Create("nodes", "", node).ok()) return 1;
  }
  // What fills the cluster: two pods of 4 CPUs on every node, of someone else.
  for (int i = 0; i < 2 * nodes; ++i) {
    json pod = {{"metadata", {{"name", absl::StrCat("busy-", i)}}},
                {"spec",
                 {{"containers",
                   {{{"name", "c"},
                     {"image", "x"},
                     {"resources", {{"requests", {{"cpu", "4"}, {"memory", "15Gi"}}}}}}}}}}};
    if (!(*server)->Create("pods", "other", pod).ok()) return 1;
  }
  for (int i = 0; i < jobs; ++i) {
    json job = {{"apiVersion", "kubetrain.io/v1"},
                {"kind", "TrainingJob"},
                {"metadata", {{"name", absl::StrCat("job-", i)}}},
                {"spec", {{"trainingInput", {{"scaleTier", "STANDARD_1"}}}}}};
    if (auto created = (*server)->Create("trainingjobs", "bench", job); !created.ok()) {
      std::cerr << created.status() << "\n";
      return 1;
    }
  }
  std::printf(
      "admission_pass: %d queued STANDARD_1 jobs (8 replicas each), %d full nodes, %d "
      "pods bound\n",
      jobs, nodes, 2 * nodes);

  kubetrain::kube::ClusterConfig config;
  config.server = (*server)->url();
  auto client = kubetrain::kube::RestClusterClient::Create(config, {.qps = 0});
  if (!client.ok()) {
    std::cerr << client.status() << "\n";
    return 1;
  }
  kubetrain::kube::Informer job_informer(
      client->get(), {.resource = kubetrain::kube::kTrainingJobs, .ns = "bench"}, {});
  job_informer.Start();
  if (!job_informer.WaitForSync(absl::Minutes(2))) return 1;
  const double rss_before = RssMiB();

  // Every pod, as the controller's informer keeps it for admission.
  kubetrain::kube::Informer pod_informer(
      client->get(),
      {.resource = kubetrain::kube::kPods,
       .transform = kubetrain::kube::GangAdmission::StripForPlacement},
      {});
  pod_informer.Start();
  if (!pod_informer.WaitForSync(absl::Minutes(2))) return 1;

  kubetrain::kube::GangAdmissionOptions admission_options;
  admission_options.ns = "bench";
  // Passes run only when called here.
  admission_options.period = absl::Hours(1);
  admission_options.min_interval = absl::Hours(1);
  kubetrain::kube::GangAdmission admission(
      client->get(), &job_informer.cache(), &pod_informer.cache(), admission_options,
      [](const std::string& ns) {
        kubetrain::core::ReconcileOptions reconcile;
        reconcile.address = kubetrain::core::KubernetesAddresses(ns);
        reconcile.gang_admission = true;
        return reconcile;
      },
      nullptr);
  if (!admission.Start(absl::Minutes(2))) return 1;

  // Every job's verdict (the controller writes it with the job's status).
  auto waiting = [&] {
    int n = 0;
    for (const json& j : (*server)->List("trainingjobs", "bench")) {
      auto verdict = admission.VerdictFor(j["metadata"]["uid"].get<std::string>());
      if (verdict && verdict->reason == "WaitingForCapacity") ++n;
    }
    return n;
  };
  // The first pass renders each job's gang once.
  absl::Time start = absl::Now();
  double cpu = CpuSeconds();
  if (!admission.RunPass().ok()) return 1;
  std::printf("  first pass (every job rendered): %.2f s, CPU %.2f s; %d jobs waiting\n",
              absl::ToDoubleSeconds(absl::Now() - start), CpuSeconds() - cpu, waiting());
  std::vector<double> wall, cpus;
  for (int i = 0; i < passes; ++i) {
    start = absl::Now();
    cpu = CpuSeconds();
    if (!admission.RunPass().ok()) return 1;
    cpus.push_back(CpuSeconds() - cpu);
    wall.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  const auto counts = (*server)->RequestCounts();
  std::printf("  one steady pass (median of %d): %.1f ms wall, %.1f ms CPU\n", passes,
              Median(wall) * 1000, Median(cpus) * 1000);
  std::printf("  RSS: %.1f MiB before admission started, %.1f MiB after (+%.1f MiB)\n", rss_before,
              RssMiB(), RssMiB() - rss_before);
  auto it = counts.find("update trainingjobs/status");
  std::printf("  status writes by the passes: %lld (verdicts go to the controller)\n",
              static_cast<long long>(it == counts.end() ? 0 : it->second));
  admission.Stop();
  job_informer.Stop();
  return 0;
}
