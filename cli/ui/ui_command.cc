// `kubetrain ui`: the study dashboard, served to a browser on this machine.
#include <pthread.h>
#include <signal.h>

#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/jobs_cluster.h"
#include "cli/local_backend.h"
#include "cli/ui/cluster_job_source.h"
#include "cli/ui/local_job_source.h"
#include "cli/ui/ui_server.h"

namespace kubetrain::cli {
namespace {

constexpr char kCommand[] = "kubetrain ui";

// Blocks SIGINT and SIGTERM in this thread, and so in every thread started
// while it lives (the HTTP workers, cpprest's pool), so that Wait() takes
// them; the previous mask comes back when it goes.
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
  }
  ~StopSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  void Wait() {
    int signal_number = 0;
    sigwait(&signals_, &signal_number);
  }

 private:
  sigset_t signals_;
  sigset_t previous_;
};

constexpr char kDefaultAddress[] = "127.0.0.1:0";

std::vector<FlagSpec> UiFlags() {
  std::vector<FlagSpec> flags = BackendFlags();
  flags.push_back(
      {"address", "HOST:PORT",
       std::string("where the page is served (default ") + kDefaultAddress + ": a free port)"});
  return flags;
}

int RunUi(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ParsedArgs parsed = ParseArgs(args, UiFlags());
  if (!parsed.error.empty()) {
    err << kCommand << ": " << parsed.error << "\n";
    return kExitUsage;
  }
  if (!parsed.positional.empty()) {
    err << kCommand << ": takes no positional arguments (got \"" << parsed.positional[0] << "\")\n";
    return kExitUsage;
  }
  const std::string address = parsed.Flag("address") ? *parsed.Flag("address") : kDefaultAddress;
  const bool local = UseLocalBackend(parsed);
  for (const char* flag : {"namespace", "context", "kubeconfig"}) {
    if (local && parsed.Has(flag)) {
      err << kCommand << ": --" << flag << " is for a cluster; the local backend has none\n";
      return kExitUsage;
    }
  }

  StopSignals stop_signals;  // before any thread starts
  std::unique_ptr<ui::JobSource> source;
  if (local) {
    absl::StatusOr<std::unique_ptr<ui::LocalJobSource>> opened =
        ui::LocalJobSource::Open(KubetrainHome());
    if (!opened.ok()) {
      err << kCommand << ": " << opened.status().message() << "\n";
      return kExitFailed;
    }
    source = *std::move(opened);
  } else {
    // As kubectl: the kubeconfig's current context and namespace unless the
    // flags say otherwise.
    ClusterTarget target;
    if (const std::string* ns = parsed.Flag("namespace")) target.namespace_name = *ns;
    if (const std::string* context = parsed.Flag("context")) target.context = *context;
    if (const std::string* kubeconfig = parsed.Flag("kubeconfig")) target.kubeconfig = *kubeconfig;
    absl::StatusOr<std::unique_ptr<ClusterJobs>> cluster = ClusterJobs::Connect(target);
    if (!cluster.ok()) {
      err << kCommand << ": " << cluster.status().message() << "\n";
      return kExitFailed;
    }
    source = std::make_unique<ui::ClusterJobSource>(*std::move(cluster));
  }
  const std::string backend = source->backend() + " (" + source->location() + ")";
  absl::StatusOr<std::unique_ptr<ui::UiServer>> server =
      ui::UiServer::Start({.address = address}, std::move(source));
  if (!server.ok()) {
    err << kCommand << ": " << server.status().message() << "\n";
    // A malformed address is the user's; one in use is not.
    return server.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  if (!(*server)->loopback()) {
    err << kCommand << ": warning: listening on " << address
        << ", beyond this machine: whoever reaches it can read every job shown\n";
  }
  out << "kubetrain ui: jobs of the " << backend << " at " << (*server)->url() << "\n"
      << "Press Ctrl-C to stop.\n"
      << std::flush;
  stop_signals.Wait();
  return kExitOk;
}

}  // namespace

std::vector<Command> UiCommands() {
  return {
      {{"ui"},
       "a read-only web page of the jobs and their studies, on 127.0.0.1 (--local, --address)",
       RunUi,
       "[--local | [--namespace NS] [--context CTX] [--kubeconfig FILE]] [--address HOST:PORT]",
       UiFlags()},
  };
}

}  // namespace kubetrain::cli
