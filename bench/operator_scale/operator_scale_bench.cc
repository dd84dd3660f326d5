// operator_scale_bench: the real kubetrain-operator (child process) against
// the in-process fake API server, with the server's latency model on (a real
// kube-apiserver on a small machine: a few milliseconds per write, a few
// hundred requests in flight), so the operator meets the round-trip-bound
// regime a real cluster shows instead of an instant store.
//
//   operator_scale_bench [--jobs 1000] [--qps Q] [--burst B] [--workers W]
//                        [--request-latency-ms 1] [--write-latency-ms 5]
//                        [--max-in-flight 400] [--study]
//                        [--peer PATH | --admission] [--rounds 1]
//
// Each run:
// 1. starts the operator and waits until its informers watch;
// 2. creates N STANDARD_1 TrainingJobs (8 replicas each) as fast as the
//    store takes them (with --study: one PREMIUM_1 tuning job instead, 31
//    replicas a trial, maxParallelTrials 10, and waits for its first 10
//    trials' 310 pods);
// 3. waits until every pod exists; reports the time from the last create,
//    pods/s, API requests per job by verb, status writes per job, the most
//    requests in flight at once and the operator's peak RSS (VmHWM).
// With --peer, the same runs alternate (rounds times) between this build's
// operator and the binary at PATH (another build, e.g. the previous commit's),
// and the pods/s of each, and their ratio, close the report. Flags the
// operator does not get (--qps, --burst, --workers) keep its own defaults.
// The fake cluster's nodes hold every pod, so where gang admission is on
// (this build's default) every job is admitted. With --admission, the runs
// alternate between this build with --gang-admission=true and =false: what
// admission costs the time to all pods.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
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

// User + system CPU seconds `pid` has used so far (/proc/PID/stat fields 14
// and 15, in clock ticks).
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::atof(field.c_str());
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return fallback;
}

bool Has(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i] == "--" + name) return true;
  }
  return false;
}

struct Setup {
  int jobs = 1000;
  bool study = false;
  bool admission = false;           // this build with and without --gang-admission
  std::string qps, burst, workers;  // "": the operator's default
  FakeApiServer::Options server;
};

struct Result {
  bool done = false;
  size_t pods = 0;
  double seconds = 0;  // last create -> every pod exists
  double settle_seconds = 0;
  double rss_mib = 0;
  double cpu_seconds = 0;  // the operator's, user + system
  int peak_in_flight = 0;
  std::map<std::string, int64_t> counts;
};

json StudyJob() {
  json params = json::array();
  params.push_back({{"parameterName", "learning_rate"},
                    {"type", "DOUBLE"},
                    {"minValue", 0.001},
                    {"maxValue", 0.1},
                    {"scaleType", "UNIT_LOG_SCALE"}});
  return {{"apiVersion", "kubetrain.io/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", "study"}}},
          {"spec",
           {{"trainingInput",
             {{"scaleTier", "PREMIUM_1"},
              {"args", {"--max_steps=10"}},
              {"hyperparameters",
               {{"goal", "MAXIMIZE"},
                {"hyperparameterMetricTag", "accuracy"},
                {"maxTrials", 20},
                {"maxParallelTrials", 10},
                {"params", params}}}}},
            {"runPolicy", {{"restartPolicy", "OnFailure"}}}}}};
}

std::optional<Result> RunOnce(const std::string& operator_binary,
                              const std::vector<std::string>& extra_args, const Setup& setup) {
  auto server = FakeApiServer::Start(setup.server);
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return std::nullopt;
  }
  {
    // Room for every pod of every job (or trial), so each is admitted where
    // admission is on (this build's default): 100 nodes of 400 CPUs, 1.2 TiB
    // and 1,000 pods each.
    for (int i = 0; i < 100; ++i) {
      json node = {
          {"metadata", {{"name", absl::StrCat("node-", i)}}},
          {"status", {{"allocatable", {{"cpu", "400"}, {"memory", "1200Gi"}, {"pods", "1000"}}}}}};
      if (auto made = (*server)->Create("nodes", "", node); !made.ok()) {
        std::cerr << made.status() << "\n";
        return std::nullopt;
      }
    }
  }
  char dir_template[] = "/tmp/operator_scale_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string kubeconfig = dir + "/kubeconfig";
  {
    std::ofstream out(kubeconfig);
    out << "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n"
        << "  cluster:\n    server: " << (*server)->url() << "\ncontexts:\n- name: fake\n"
        << "  context: {cluster: fake, namespace: bench}\n";
  }
  const std::string log_path = dir + "/operator.log";
  std::vector<std::string> args = {operator_binary,  "--kubeconfig", kubeconfig,
                                   "--namespace",    "bench",        "--leader-elect=false",
                                   "--http-address", "127.0.0.1:0"};
  if (!setup.workers.empty()) args.insert(args.end(), {"--workers", setup.workers});
  if (!setup.qps.empty()) args.insert(args.end(), {"--kube-api-qps", setup.qps});
  if (!setup.burst.empty()) args.insert(args.end(), {"--kube-api-burst", setup.burst});
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Wait for the operator's three watches (jobs, pods, services).
  for (int i = 0; i < 3000; ++i) {
    auto c = (*server)->RequestCounts();
    if (c["watch trainingjobs"] > 0 && c["watch pods"] > 0 && c["watch services"] > 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  (*server)->ResetRequestCounts();

  Result result;
  if (setup.study) {
    if (auto created = (*server)->Create("trainingjobs", "bench", StudyJob()); !created.ok()) {
      std::cerr << created.status() << "\n";
      return std::nullopt;
    }
    result.pods = 10 * 31;
  } else {
    for (int i = 0; i < setup.jobs; ++i) {
      json job = {{"apiVersion", "kubetrain.io/v1"},
                  {"kind", "TrainingJob"},
                  {"metadata", {{"name", absl::StrCat("job-", i)}}},
                  {"spec",
                   {{"trainingInput", {{"scaleTier", "STANDARD_1"}, {"args", {"--max_steps=10"}}}},
                    {"runPolicy", {{"restartPolicy", "OnFailure"}}}}}};
      if (auto created = (*server)->Create("trainingjobs", "bench", job); !created.ok()) {
        std::cerr << created.status() << "\n";
        return std::nullopt;
      }
    }
    result.pods = static_cast<size_t>(setup.jobs) * 8;
  }
  const absl::Time last_create = absl::Now();
  result.done = (*server)->WaitUntil([&] { return (*server)->Count("pods") >= result.pods; },
                                     absl::Minutes(15));
  const absl::Time all_pods = absl::Now();
  // Let the status writes that follow the last creates land, then count.
  (*server)->WaitUntil(
      [&] {
        for (const json& j : (*server)->List("trainingjobs", "bench")) {
          // Every pod exists, none runs (nothing runs pods here): the jobs
          // wait for them, the study with its first trials started.
          const std::string state = j.value("status", json::object()).value("state", "");
          if (state != "PREPARING" && state != "RUNNING") return false;
        }
        return true;
      },
      absl::Seconds(120));
  result.settle_seconds = absl::ToDoubleSeconds(absl::Now() - last_create);
  result.seconds = absl::ToDoubleSeconds(all_pods - last_create);
  result.rss_mib = static_cast<double>(PeakRssKiB(pid)) / 1024.0;
  result.cpu_seconds = CpuSeconds(pid);
  result.peak_in_flight = (*server)->PeakInFlight();
  result.counts = (*server)->RequestCounts();
  kill(pid, SIGTERM);
  int status;
  waitpid(pid, &status, 0);
  return result;
}

void Report(const std::string& who, const Setup& setup, const Result& r) {
  const int jobs = setup.study ? 1 : setup.jobs;
  int64_t total = 0, writes = 0;
  for (const auto& [key, n] : r.counts) {
    total += n;
    if (key.rfind("create", 0) == 0 || key.rfind("update", 0) == 0 || key.rfind("patch", 0) == 0 ||
        key.rfind("delete", 0) == 0) {
      writes += n;
    }
  }
  auto count = [&](const std::string& key) {
    auto it = r.counts.find(key);
    return it == r.counts.end() ? int64_t{0} : it->second;
  };
  std::printf("%s\n", who.c_str());
  std::printf("  all %zu pods exist: %s\n", r.pods, r.done ? "yes" : "NO (timed out)");
  std::printf("  last create -> all pods                %8.2f s   %8.1f pods/s\n", r.seconds,
              static_cast<double>(r.pods) / std::max(r.seconds, 1e-9));
  std::printf("  last create -> status written          %8.2f s\n", r.settle_seconds);
  std::printf("  operator peak RSS                      %8.1f MiB\n", r.rss_mib);
  std::printf("  operator CPU (user + system)           %8.2f s\n", r.cpu_seconds);
  std::printf("  requests in flight at most             %8d\n", r.peak_in_flight);
  std::printf("  API requests per job                   %8.2f   (writes %.2f)\n",
              static_cast<double>(total) / jobs, static_cast<double>(writes) / jobs);
  std::printf("  status writes per job                  %8.2f\n",
              static_cast<double>(count("update trainingjobs/status") +
                                  count("patch trainingjobs/status")) /
                  jobs);
  std::printf("  pod+service creates per pod            %8.2f\n",
              static_cast<double>(count("create pods") + count("create services")) /
                  static_cast<double>(r.pods));
  for (const auto& [key, n] : r.counts) {
    std::printf("    %-28s %8lld  (%.2f per job)\n", key.c_str(), static_cast<long long>(n),
                static_cast<double>(n) / jobs);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Setup setup;
  setup.jobs = std::atoi(Flag(argc, argv, "jobs", "1000").c_str());
  setup.study = Has(argc, argv, "study");
  setup.admission = Has(argc, argv, "admission");
  setup.qps = Flag(argc, argv, "qps", "");
  setup.burst = Flag(argc, argv, "burst", "");
  setup.workers = Flag(argc, argv, "workers", "");
  setup.server.bookmark_interval = absl::Seconds(5);
  setup.server.default_nodes = 0;  // the bench's own (RunOnce)
  setup.server.request_latency =
      absl::Milliseconds(std::atof(Flag(argc, argv, "request-latency-ms", "1").c_str()));
  setup.server.write_latency =
      absl::Milliseconds(std::atof(Flag(argc, argv, "write-latency-ms", "5").c_str()));
  setup.server.max_in_flight = std::atoi(Flag(argc, argv, "max-in-flight", "400").c_str());
  const std::string peer = Flag(argc, argv, "peer", "");
  const int rounds = std::max(1, std::atoi(Flag(argc, argv, "rounds", "1").c_str()));

  std::printf(
      "operator_scale: %s, server latency %s per request + %s per write, %d in flight at most\n",
      setup.study ? "one PREMIUM_1 study, 10 trials at once"
                  : absl::StrCat(setup.jobs, " STANDARD_1 TrainingJobs x 8 replicas").c_str(),
      absl::FormatDuration(setup.server.request_latency).c_str(),
      absl::FormatDuration(setup.server.write_latency).c_str(), setup.server.max_in_flight);
  struct Operator {
    std::string who, binary;
    std::vector<std::string> args;
  };
  std::vector<Operator> operators = {{"this build", KUBETRAIN_OPERATOR_BINARY, {}}};
  if (setup.admission) {
    operators = {
        {"this build, admission on", KUBETRAIN_OPERATOR_BINARY, {"--gang-admission=true"}},
        {"this build, admission off", KUBETRAIN_OPERATOR_BINARY, {"--gang-admission=false"}}};
  } else if (!peer.empty()) {
    operators.push_back({"peer " + peer, peer, {}});
  }
  std::map<std::string, std::vector<double>> rates;
  bool all_done = true;
  for (int round = 0; round < rounds; ++round) {
    for (const auto& [who, binary, args] : operators) {
      std::optional<Result> r = RunOnce(binary, args, setup);
      if (!r) return 1;
      Report(absl::StrCat(who, ", round ", round + 1), setup, *r);
      rates[who].push_back(static_cast<double>(r->pods) / std::max(r->seconds, 1e-9));
      all_done &= r->done;
    }
  }
  if (operators.size() == 2) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double mine = median(rates[operators[0].who]);
    const double theirs = median(rates[operators[1].who]);
    std::printf("pods/s, median of %d: %s %.1f, %s %.1f, ratio %.2f\n", rounds,
                operators[0].who.c_str(), mine, operators[1].who.c_str(), theirs, mine / theirs);
  }
  return all_done ? 0 : 1;
}
