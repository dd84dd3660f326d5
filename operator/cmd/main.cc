// kubetrain-operator: reconciles TrainingJobs on a Kubernetes cluster.
//
//   kubetrain-operator [--kubeconfig PATH [--context NAME]] [--namespace NS]
//                      [--workers 4] [--leader-elect=true|false]
//                      [--kube-api-qps 50] [--kube-api-burst 100]
//                      [--http-address :8080] [--log-level info]
//                      [--restart-backoff 10s]
//                      [--metrics-listen :9090 --metrics-address SVC:9090
//                       --pod-name NAME] ...
//
// /metrics, /healthz and /readyz are served on --http-address from the start,
// before leader election: a standby replica is live and ready too, and its
// kubetrain_operator_leader reads 0.
// With --metrics-listen, the Metrics gRPC service (trials' reports) is served
// there too; a replica answers it only while it leads and its caches are
// synced (before: UNAVAILABLE, and the trial retries). The leader labels its
// own pod (--pod-name) kubetrain.io/metrics-leader=true, and the Service at
// --metrics-address selects that label, so reports reach the leader.
// Credentials: --kubeconfig, else the pod's service account, else $KUBECONFIG.
// Leader election is on by default; --leader-elect=false for a single replica.
// SIGTERM/SIGINT stop the workers and release the lease.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/observability/metrics_server.h"
#include "grpcpp/grpcpp.h"
#include "operator/core/reconciler.h"
#include "operator/kube/controller.h"
#include "operator/kube/kubeconfig.h"
#include "operator/kube/leader_election.h"
#include "operator/kube/leader_pod_label.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/study_store.h"
#include "operator/kube/trial_metrics.h"
#include "operator/metrics/metrics_service.h"
#include "operator/observability/operator_metrics.h"
#include "operator/tuner/tuner.h"
#include "prometheus/registry.h"

namespace {

using kubetrain::kube::ClusterConfig;

constexpr char kUsage[] = R"(usage: kubetrain-operator [flags]
  --kubeconfig PATH            kubeconfig file (default: in-cluster, then $KUBECONFIG)
  --context NAME               kubeconfig context (default: current-context)
  --namespace NS               watch only NS (default: all namespaces)
  --workers N                  concurrent reconciles (default 4)
  --leader-elect=BOOL          elect a leader over a Lease (default true)
  --leader-election-namespace NS  where the Lease lives (default: --namespace, else the
                               credentials' namespace)
  --lease-name NAME            (default kubetrain-operator)
  --lease-duration SECONDS     (default 15)
  --renew-deadline SECONDS     (default 10)
  --retry-period SECONDS       (default 2)
  --kube-api-qps QPS           client-side request rate limit (default 50)
  --kube-api-burst N           (default 100)
  --default-image IMAGE        image for replicas without imageUri, pulled IfNotPresent
                               (default {default_image})
  --metrics-listen HOST:PORT   serve the Metrics gRPC service, where trials report their
                               metrics (port 0 picks a free port; the bound address is
                               printed as "serving trial metrics on HOST:PORT")
  --metrics-address HOST:PORT  where trials reach that service (the Service in front of
                               the leader), exported to them as KUBETRAIN_METRICS_ADDR;
                               needed with --metrics-listen, and only with it
  --pod-name NAME              this replica's pod (downward API): the leader labels it
                               kubetrain.io/metrics-leader=true
  --pod-namespace NS           the pod's namespace (default: the credentials' namespace,
                               in a pod its own)
  --http-address HOST:PORT     serve /metrics, /healthz, /readyz (default :8080; port 0
                               picks a free port; the bound address is printed as
                               "serving http on HOST:PORT")
  --log-level LEVEL            error, warning, info or debug (default info): which of
                               the operator's own messages reach stderr
  --restart-backoff DURATION   wait before recreating a failed replica, doubled with each
                               further recreation up to 5m (default 10s; e.g. 500ms, 2s, 1m)
)";

// Severity of the operator's own messages; --log-level keeps those at or
// above the level.
enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };
LogLevel g_log_level = LogLevel::kInfo;

bool ParseLogLevel(const std::string& value, LogLevel* out) {
  static const std::map<std::string, LogLevel> kLevels = {{"error", LogLevel::kError},
                                                          {"warning", LogLevel::kWarning},
                                                          {"info", LogLevel::kInfo},
                                                          {"debug", LogLevel::kDebug}};
  auto it = kLevels.find(value);
  if (it == kLevels.end()) return false;
  *out = it->second;
  return true;
}

void Log(LogLevel level, const std::string& message) {
  if (level <= g_log_level) std::cerr << "kubetrain-operator: " << message << "\n";
}

// Times every Suggest of the wrapped tuner into the operator's metrics.
class TimedTuner : public kubetrain::tuner::Tuner {
 public:
  TimedTuner(std::unique_ptr<kubetrain::tuner::Tuner> inner,
             kubetrain::observability::OperatorMetrics* metrics)
      : inner_(std::move(inner)), metrics_(metrics) {}

  std::vector<kubetrain::tuner::Assignment> Suggest(
      const std::vector<kubetrain::tuner::TrialRecord>& history, int count) override {
    absl::Time start = absl::Now();
    auto out = inner_->Suggest(history, count);
    metrics_->ObserveTrialSuggestion(absl::ToDoubleSeconds(absl::Now() - start));
    return out;
  }

 private:
  std::unique_ptr<kubetrain::tuner::Tuner> inner_;
  kubetrain::observability::OperatorMetrics* metrics_;
};

struct Flags {
  std::string kubeconfig, context, ns, lease_ns, lease_name = "kubetrain-operator";
  std::string default_image, metrics_address, metrics_listen, pod_name, pod_ns;
  std::string http_address = ":8080";
  LogLevel log_level = LogLevel::kInfo;
  int workers = 4;
  bool leader_elect = true;
  double qps = 50, lease_duration = 15, renew_deadline = 10, retry_period = 2;
  int burst = 100;
  absl::Duration restart_backoff = kubetrain::core::kRecreateBackoffBase;
};

bool ParseFlags(int argc, char** argv, Flags* flags, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *error = "";
      return false;
    }
    if (!absl::StartsWith(arg, "--")) {
      *error = "unexpected argument " + arg;
      return false;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) {
        *error = "--" + name + " needs a value";
        return false;
      }
      value = argv[++i];
      return true;
    };
    auto number = [&](double* out) {
      if (!next()) return false;
      if (!absl::SimpleAtod(value, out) || *out < 0) {
        *error = "--" + name + ": not a non-negative number: " + value;
        return false;
      }
      return true;
    };
    auto integer = [&](int* out) {
      if (!next()) return false;
      if (!absl::SimpleAtoi(value, out) || *out < 0) {
        *error = "--" + name + ": not a non-negative integer: " + value;
        return false;
      }
      return true;
    };
    std::map<std::string, std::string*> strings = {{"kubeconfig", &flags->kubeconfig},
                                                   {"context", &flags->context},
                                                   {"namespace", &flags->ns},
                                                   {"leader-election-namespace", &flags->lease_ns},
                                                   {"lease-name", &flags->lease_name},
                                                   {"default-image", &flags->default_image},
                                                   {"metrics-address", &flags->metrics_address},
                                                   {"metrics-listen", &flags->metrics_listen},
                                                   {"pod-name", &flags->pod_name},
                                                   {"pod-namespace", &flags->pod_ns},
                                                   {"http-address", &flags->http_address}};
    if (auto it = strings.find(name); it != strings.end()) {
      if (!next()) return false;
      *it->second = value;
    } else if (name == "leader-elect") {
      if (!has_value) value = "true";
      if (value != "true" && value != "false") {
        *error = "--leader-elect must be true or false";
        return false;
      }
      flags->leader_elect = value == "true";
    } else if (name == "log-level") {
      if (!next()) return false;
      if (!ParseLogLevel(value, &flags->log_level)) {
        *error = "--log-level must be error, warning, info or debug, not " + value;
        return false;
      }
    } else if (name == "restart-backoff") {
      if (!next()) return false;
      // A zero base would recreate a crash-looping replica with no pause at all.
      if (!absl::ParseDuration(value, &flags->restart_backoff) ||
          flags->restart_backoff <= absl::ZeroDuration() ||
          flags->restart_backoff == absl::InfiniteDuration()) {
        *error = "--restart-backoff: not a positive duration such as 500ms, 10s or 1m: " + value;
        return false;
      }
    } else if (name == "workers") {
      if (!integer(&flags->workers)) return false;
    } else if (name == "kube-api-burst") {
      if (!integer(&flags->burst)) return false;
    } else if (name == "kube-api-qps") {
      if (!number(&flags->qps)) return false;
    } else if (name == "lease-duration") {
      if (!number(&flags->lease_duration)) return false;
    } else if (name == "renew-deadline") {
      if (!number(&flags->renew_deadline)) return false;
    } else if (name == "retry-period") {
      if (!number(&flags->retry_period)) return false;
    } else {
      *error = "unknown flag --" + name;
      return false;
    }
  }
  // Half of the pair would hand trials an address nobody serves, or serve
  // reports no trial is told about.
  if (flags->metrics_listen.empty() != flags->metrics_address.empty()) {
    *error = flags->metrics_listen.empty()
                 ? "--metrics-address needs --metrics-listen: nothing would serve the address "
                   "given to trials"
                 : "--metrics-listen needs --metrics-address: the address trials reach the "
                   "service at (e.g. kubetrain-operator-trials.kubetrain-system.svc:9090)";
    return false;
  }
  return true;
}

absl::StatusOr<ClusterConfig> LoadCredentials(const Flags& flags) {
  if (!flags.kubeconfig.empty())
    return kubetrain::kube::LoadKubeconfig(flags.kubeconfig, flags.context);
  auto in_cluster = kubetrain::kube::LoadInCluster();
  if (in_cluster.ok()) return in_cluster;
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    return kubetrain::kube::LoadKubeconfig(env, flags.context);
  }
  return in_cluster.status();
}

}  // namespace

int main(int argc, char** argv) {
  // Signals are taken by one thread with sigwait; block them first, so every
  // thread started later (cpprest's pool included) inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Flags flags;
  std::string error;
  if (!ParseFlags(argc, argv, &flags, &error)) {
    if (!error.empty()) std::cerr << "kubetrain-operator: " << error << "\n";
    std::cerr << absl::StrReplaceAll(kUsage,
                                     {{"{default_image}", kubetrain::core::kDefaultRuntimeImage}});
    return error.empty() ? 0 : 2;
  }
  g_log_level = flags.log_level;

  // Metrics and probes first: they answer while credentials load and while
  // this replica waits for the lease.
  auto registry = std::make_shared<prometheus::Registry>();
  kubetrain::observability::OperatorMetrics metrics(*registry);
  auto server =
      kubetrain::observability::MetricsServer::Start({.address = flags.http_address}, {registry});
  if (!server.ok()) {
    Log(LogLevel::kError,
        absl::StrCat("--http-address ", flags.http_address, ": ", server.status().ToString()));
    return 1;
  }
  {
    std::string host = flags.http_address.substr(0, flags.http_address.rfind(':'));
    Log(LogLevel::kInfo,
        absl::StrCat("serving http on ", host.empty() ? "0.0.0.0" : host, ":", (*server)->port()));
  }

  auto config = LoadCredentials(flags);
  if (!config.ok()) {
    Log(LogLevel::kError, absl::StrCat("credentials: ", config.status().ToString()));
    return 1;
  }
  kubetrain::kube::RestClientOptions client_options{.qps = flags.qps, .burst = flags.burst};
  client_options.on_request = [&metrics](std::string_view verb, int code) {
    metrics.CountApiRequest(verb, code);
  };
  auto client = kubetrain::kube::RestClusterClient::Create(*config, client_options);
  if (!client.ok()) {
    Log(LogLevel::kError, client.status().ToString());
    return 1;
  }
  (*server)->SetReady(true);

  absl::Mutex mu;
  bool stop = false, leading = !flags.leader_elect;
  std::thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    absl::MutexLock lock(&mu);
    stop = true;
  }).detach();

  kubetrain::kube::InMemoryStudyStore studies;
  kubetrain::kube::ControllerOptions options;
  options.ns = flags.ns;
  options.workers = std::max(1, flags.workers);
  if (!flags.default_image.empty()) options.reconcile.default_image = flags.default_image;
  options.reconcile.metrics_address = flags.metrics_address;
  kubetrain::kube::TrialTokenIssuer trial_tokens;
  if (!flags.metrics_listen.empty()) {
    options.reconcile.trial_token = [&trial_tokens](const std::string& uid,
                                                    const std::string& trial) {
      return trial_tokens.Token(uid, trial);
    };
  }
  options.reconcile.recreate_backoff_base = flags.restart_backoff;
  options.metrics = &metrics;
  options.reconcile.tuner_factory =
      [&metrics](const kubetrain::v1::HyperparameterSpec& spec,
                 uint64_t seed) -> absl::StatusOr<std::unique_ptr<kubetrain::tuner::Tuner>> {
    auto tuner = kubetrain::tuner::Tuner::Create(spec, seed);
    if (!tuner.ok()) return tuner.status();
    return std::unique_ptr<kubetrain::tuner::Tuner>(new TimedTuner(*std::move(tuner), &metrics));
  };
  options.reconcile.stop_rule = kubetrain::tuner::ShouldStopEarly;
  kubetrain::kube::Controller controller(client->get(), options, &studies);
  // New trial metrics (the Metrics service reports into `studies`) requeue their job.
  studies.SetListener(
      [&controller](const std::string& job_uid) { controller.EnqueueByUid(job_uid); });

  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string identity = absl::StrCat(host, "_", getpid());
  const std::string lease_ns = !flags.lease_ns.empty() ? flags.lease_ns
                               : !flags.ns.empty()     ? flags.ns
                                                       : config->namespace_name;

  // The Metrics service: answered from the start, UNAVAILABLE until this
  // replica leads with synced caches.
  std::unique_ptr<kubetrain::kube::ClusterTrialMetrics> trial_metrics;
  std::unique_ptr<kubetrain::metrics::MetricsServiceImpl> metrics_service;
  std::unique_ptr<grpc::Server> metrics_grpc;
  std::unique_ptr<kubetrain::kube::LeaderPodLabel> leader_label;
  if (!flags.metrics_listen.empty()) {
    trial_metrics = std::make_unique<kubetrain::kube::ClusterTrialMetrics>(&controller, &studies);
    metrics_service = std::make_unique<kubetrain::metrics::MetricsServiceImpl>(trial_metrics.get(),
                                                                               trial_metrics.get());
    // ":9090" is every interface, as for --http-address.
    std::string listen = flags.metrics_listen;
    if (absl::StartsWith(listen, ":")) listen = "0.0.0.0" + listen;
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(metrics_service.get());
    metrics_grpc = builder.BuildAndStart();
    if (metrics_grpc == nullptr || port == 0) {
      Log(LogLevel::kError, absl::StrCat("--metrics-listen ", flags.metrics_listen,
                                         ": cannot listen there (address in use or malformed)"));
      return 1;
    }
    Log(LogLevel::kInfo,
        absl::StrCat("serving trial metrics on ", listen.substr(0, listen.rfind(':')), ":", port));
    if (!flags.pod_name.empty()) {
      leader_label = std::make_unique<kubetrain::kube::LeaderPodLabel>(
          client->get(), flags.pod_ns.empty() ? config->namespace_name : flags.pod_ns,
          flags.pod_name);
      // Left over from when this pod last led (the container restarted).
      if (absl::Status released = leader_label->Release(); !released.ok()) {
        Log(LogLevel::kError, absl::StrCat("--pod-name: ", released.ToString()));
        return 1;
      }
    } else if (flags.leader_elect) {
      Log(LogLevel::kWarning,
          "--metrics-listen without --pod-name: the leader's pod is not labelled, so a "
          "Service in front of several replicas cannot send reports to the leader");
    }
  }

  std::unique_ptr<kubetrain::kube::LeaderElector> elector;
  if (flags.leader_elect) {
    elector = std::make_unique<kubetrain::kube::LeaderElector>(
        client->get(),
        kubetrain::kube::LeaderElectionConfig{.ns = lease_ns,
                                              .lease_name = flags.lease_name,
                                              .identity = identity,
                                              .lease_duration = absl::Seconds(flags.lease_duration),
                                              .renew_deadline = absl::Seconds(flags.renew_deadline),
                                              .retry_period = absl::Seconds(flags.retry_period)});
    elector->Start(
        [&] {
          metrics.SetLeader(true);
          absl::MutexLock lock(&mu);
          leading = true;
        },
        [&metrics] {
          metrics.SetLeader(false);
          // Another replica may be acting already: stop at once, as client-go
          // controllers do, and let the restart rejoin the election.
          Log(LogLevel::kError, "lost the leader lease, exiting");
          std::_Exit(1);
        });
  } else {
    metrics.SetLeader(true);
  }

  struct Wake {
    const bool* stop;
    const bool* leading;
    bool Ready() const { return *stop || *leading; }
  } wake{&stop, &leading};
  bool started = false;
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&wake, &Wake::Ready));
    started = !stop;
  }
  if (started) {
    Log(LogLevel::kInfo,
        absl::StrCat(identity, " starting ", options.workers, " workers on ",
                     flags.ns.empty() ? std::string("all namespaces") : "namespace " + flags.ns));
    if (!controller.Start()) {
      Log(LogLevel::kError, "caches did not sync");
      return 1;
    }
    Log(LogLevel::kInfo, "caches synced");
    if (trial_metrics) trial_metrics->SetLeading(true);
    std::thread claim;
    if (leader_label) {
      // Until the label is on, the Service sends reports nowhere useful (and
      // reporters retry): keep trying, backing off up to 30 s.
      claim = std::thread([&] {
        absl::Duration wait = absl::Seconds(1);
        for (;;) {
          absl::Status claimed = leader_label->Claim();
          if (claimed.ok()) {
            Log(LogLevel::kInfo, absl::StrCat("labelled pod ", flags.pod_name, " ",
                                              kubetrain::kube::kLabelMetricsLeader, "=true"));
            return;
          }
          Log(LogLevel::kWarning, claimed.ToString());
          absl::MutexLock lock(&mu);
          if (mu.AwaitWithTimeout(absl::Condition(&stop), wait)) return;
          wait = std::min(wait * 2, absl::Seconds(30));
        }
      });
    }
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&stop));
    }
    if (claim.joinable()) claim.join();
  }
  Log(LogLevel::kInfo, "stopping");
  if (metrics_grpc)
    metrics_grpc->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // A standby that takes over relabels; dropping the label now keeps the
  // Service from sending reports here meanwhile.
  if (leader_label) {
    if (absl::Status released = leader_label->Release(); !released.ok()) {
      Log(LogLevel::kWarning, released.ToString());
    }
  }
  controller.Stop();
  if (elector) elector->Stop();
  return 0;
}
