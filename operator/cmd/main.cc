// kubetrain-operator: reconciles TrainingJobs on a Kubernetes cluster.
//
//   kubetrain-operator [--kubeconfig PATH [--context NAME]] [--namespace NS]
//                      [--workers 16] [--leader-elect=true|false]
//                      [--gang-admission=true|false] [--admission-backfill-limit 10m]
//                      [--kube-api-qps 2000] [--kube-api-burst 4000]
//                      [--kube-api-io-threads 2]
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
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/python_runtimes.h"
#include "common/flags/flags.h"
#include "common/observability/metrics_server.h"
#include "grpcpp/grpcpp.h"
#include "operator/core/gang_admission.h"
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
  std::string runtime_catalog;
  std::string http_address = ":8080";
  LogLevel log_level = LogLevel::kInfo;
  // Measured, not habit: docs/operator.md, "Throughput".
  int workers = 16;
  bool leader_elect = true;
  bool gang_admission = true;
  absl::Duration admission_backfill_limit = kubetrain::core::AdmissionPolicy().backfill_limit;
  double qps = 2000, lease_duration = 15, renew_deadline = 10, retry_period = 2;
  int burst = 4000;
  int io_threads = 2;
  absl::Duration restart_backoff = kubetrain::core::kRecreateBackoffBase;
};

// A number flag's check: the value must parse and be at least 0. CLI11
// puts the flag's name in front: "--workers: not a non-negative integer: x".
template <typename T>
CLI::Validator NonNegative(const char* what) {
  return CLI::Validator(
      [what](std::string& value) -> std::string {
        T parsed;
        bool ok;
        if constexpr (std::is_integral_v<T>) {
          ok = absl::SimpleAtoi(value, &parsed);
        } else {
          ok = absl::SimpleAtod(value, &parsed);
        }
        if (ok && parsed >= 0) return "";
        return absl::StrCat("not a non-negative ", what, ": ", value);
      },
      "");
}

// The flags, their help (generated: usage line, "--name VALUE  what (default X)")
// and their checks; the values land in `flags`.
void DefineFlags(CLI::App& app, Flags* flags) {
  kubetrain::flags::Configure(app);
  auto text = [&](const char* name, std::string* value, const char* type, const char* what) {
    return app.add_option(name, *value, what)->type_name(type);
  };
  auto integer = [&](const char* name, int* value, const char* type, const char* what) {
    return app.add_option(name, *value, what)
        ->type_name(type)
        ->capture_default_str()
        ->check(NonNegative<int>("integer"));
  };
  auto number = [&](const char* name, double* value, const char* type, const char* what) {
    return app.add_option(name, *value, what)
        ->type_name(type)
        ->capture_default_str()
        ->check(NonNegative<double>("number"));
  };
  text("--kubeconfig", &flags->kubeconfig, "PATH",
       "kubeconfig file (default: in-cluster, then $KUBECONFIG)");
  text("--context", &flags->context, "NAME", "kubeconfig context (default: current-context)");
  text("--namespace", &flags->ns, "NS", "watch only NS (default: all namespaces)");
  integer("--workers", &flags->workers, "N", "concurrent reconciles");
  // A switch: alone it is true; a value must be spelled true or false.
  auto boolean = [&](const char* name, bool* value, const char* what) {
    app.add_option_function<std::string>(
           name,
           [name, value](const std::string& given) {
             if (given != "true" && given != "false") {
               kubetrain::flags::Reject(std::string(name) + " must be true or false");
             }
             *value = given == "true";
           },
           what)
        ->type_name("=BOOL")
        ->expected(0)
        ->default_str(*value ? "true" : "false");
  };
  boolean("--leader-elect", &flags->leader_elect, "elect a leader over a Lease");
  boolean("--gang-admission", &flags->gang_admission,
          "create a job's pods only once all of them can be placed\n"
          "(docs/admission.md); an operator confined to one namespace\n"
          "needs deploy/rbac/admission for it, or false");
  app.add_option_function<std::string>(
         "--admission-backfill-limit",
         [flags](const std::string& value) {
           if (!absl::ParseDuration(value, &flags->admission_backfill_limit) ||
               flags->admission_backfill_limit < absl::ZeroDuration()) {
             kubetrain::flags::Reject(
                 "--admission-backfill-limit: not a duration such as 0s, 10m or 1h: " + value);
           }
         },
         "how long jobs that fit may pass one that waits for\n"
         "capacity, before they wait behind it")
      ->type_name("DURATION")
      ->default_str(absl::FormatDuration(flags->admission_backfill_limit));
  text("--leader-election-namespace", &flags->lease_ns, "NS",
       "where the Lease lives (default: --namespace, else the\ncredentials' namespace)");
  text("--lease-name", &flags->lease_name, "NAME", "")->capture_default_str();
  number("--lease-duration", &flags->lease_duration, "SECONDS", "");
  number("--renew-deadline", &flags->renew_deadline, "SECONDS", "");
  number("--retry-period", &flags->retry_period, "SECONDS", "");
  number("--kube-api-qps", &flags->qps, "QPS", "client-side request rate limit");
  integer("--kube-api-burst", &flags->burst, "N", "");
  integer("--kube-api-io-threads", &flags->io_threads, "N",
          "threads of the API client's I/O (at least 1)");
  text("--default-image", &flags->default_image, "IMAGE",
       "image for replicas without imageUri, pulled IfNotPresent")
      ->default_str(kubetrain::core::kDefaultRuntimeImage);
  text("--runtime-catalog", &flags->runtime_catalog, "FILE",
       "the cluster's runtime catalog (runtimeVersion and\n"
       "pythonVersion to image; the kubetrain-runtimes ConfigMap,\n"
       "mounted), read again when it changes; unset: kubetrain's\n"
       "own runtime only");
  text("--metrics-listen", &flags->metrics_listen, "HOST:PORT",
       "serve the Metrics gRPC service, where trials report their\n"
       "metrics (port 0 picks a free port; the bound address is\n"
       "printed as \"serving trial metrics on HOST:PORT\")");
  text("--metrics-address", &flags->metrics_address, "HOST:PORT",
       "where trials reach that service (the Service in front of\n"
       "the leader), exported to them as KUBETRAIN_METRICS_ADDR;\n"
       "needed with --metrics-listen, and only with it");
  text("--pod-name", &flags->pod_name, "NAME",
       "this replica's pod (downward API): the leader labels it\n"
       "kubetrain.io/metrics-leader=true");
  text("--pod-namespace", &flags->pod_ns, "NS",
       "the pod's namespace (default: the credentials' namespace,\nin a pod its own)");
  text("--http-address", &flags->http_address, "HOST:PORT",
       "serve /metrics, /healthz, /readyz (port 0 picks a free\n"
       "port; the bound address is printed as \"serving http on\n"
       "HOST:PORT\")")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--log-level",
         [flags](const std::string& value) {
           if (!ParseLogLevel(value, &flags->log_level)) {
             kubetrain::flags::Reject("--log-level must be error, warning, info or debug, not " +
                                      value);
           }
         },
         "error, warning, info or debug: which of the operator's own\n"
         "messages reach stderr")
      ->type_name("LEVEL")
      ->default_str("info");
  app.add_option_function<std::string>(
         "--restart-backoff",
         [flags](const std::string& value) {
           // A zero base would recreate a crash-looping replica with no pause at all.
           if (!absl::ParseDuration(value, &flags->restart_backoff) ||
               flags->restart_backoff <= absl::ZeroDuration() ||
               flags->restart_backoff == absl::InfiniteDuration()) {
             kubetrain::flags::Reject(
                 "--restart-backoff: not a positive duration such as 500ms, 10s or 1m: " + value);
           }
         },
         "wait before recreating a failed replica, doubled with each\n"
         "further recreation up to 5m (e.g. 500ms, 2s, 1m)")
      ->type_name("DURATION")
      ->default_str(absl::FormatDuration(flags->restart_backoff));
}

// Parses argv into `flags`. False with `error` empty for --help, with the
// message otherwise.
bool ParseFlags(CLI::App& app, int argc, char** argv, Flags* flags, std::string* error) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    *error = "";
    return false;
  } catch (const CLI::ParseError& e) {
    *error = kubetrain::flags::Describe(app, e);
    return false;
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
  CLI::App app("usage: kubetrain-operator [flags]", "kubetrain-operator");
  DefineFlags(app, &flags);
  std::string error;
  if (!ParseFlags(app, argc, argv, &flags, &error)) {
    if (!error.empty()) std::cerr << "kubetrain-operator: " << error << "\n";
    std::cerr << app.help();
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
  kubetrain::kube::SetClientIoThreads(static_cast<size_t>(flags.io_threads));
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
  options.gang_admission = flags.gang_admission;
  options.admission.policy.backfill_limit = flags.admission_backfill_limit;
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
  std::optional<kubetrain::api::RuntimeCatalogFile> runtime_catalog;
  if (!flags.runtime_catalog.empty()) {
    runtime_catalog.emplace(flags.runtime_catalog,
                            [](const std::string& message) { Log(LogLevel::kInfo, message); });
    runtime_catalog->Current();  // says now what it offers, or why it cannot be read
    options.runtime_catalog = &*runtime_catalog;
  }
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
