#pragma once

// What the `kubetrain` commands share about the local backend: where its
// state lives, how to open it, and the local controller process.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cli/commands.h"
#include "operator/local/controller.h"
#include "operator/local/job_store.h"

namespace kubetrain::cli {

// $KUBETRAIN_HOME, else ~/.kubetrain.
std::string KubetrainHome();

// This machine's runtime catalog: $KUBETRAIN_HOME/runtimes.yaml (the local
// backend's runtimes beside kubetrain's own; api/python_runtimes.h).
std::string LocalRuntimeCatalogPath(const std::string& home);

// The --runtime-catalog flag of the commands that check a job.
inline constexpr char kRuntimeCatalogFlag[] = "runtime-catalog";
inline constexpr char kRuntimeCatalogFlagHelp[] =
    "the runtime catalog runtimeVersion/pythonVersion are checked against (default: "
    "$KUBETRAIN_HOME/runtimes.yaml, else the built-in one)";

// The catalog a command checks a job against: --runtime-catalog FILE when
// given, else this machine's when it exists, else the built-in one. The
// error names the file, its line and field.
absl::StatusOr<api::PythonRuntimeCatalog> CommandRuntimeCatalog(const ParsedArgs& parsed);

// Opens (creating) $KUBETRAIN_HOME/jobs.db.
absl::StatusOr<std::unique_ptr<local::JobStore>> OpenLocalStore(const std::string& home);

// True when the command asks for the local backend: --local (or
// --local=true); without the flag, KUBETRAIN_BACKEND=local. --local=false is
// the cluster whatever the environment says.
bool UseLocalBackend(const ParsedArgs& parsed);

// The `kubetrain-runtime` binary replicas run: $KUBETRAIN_RUNTIME, else next to
// this executable, else in the build tree beside it, else "kubetrain-runtime"
// (PATH).
std::string RuntimeBinary();

// Runs the local controller in this process until `stop` is set (by
// SIGINT/SIGTERM) or, with exit_when_idle, once no job has needed it for a
// few seconds. Returns an exit code; 0 also when another controller already
// runs (there is nothing to do).
struct ServeOptions {
  bool exit_when_idle = false;
  bool quiet_if_running = false;
  // Process slots (local::ControllerOptions::slots); 0: no admission.
  int slots = 0;
};

// The process slots of `kubetrain local serve`: --slots when given, else
// $KUBETRAIN_LOCAL_SLOTS (what a controller started by `jobs submit`
// inherits), else this process's CPUs. A whole number from 0 (every job at
// once) to 1000; an error names the flag or the variable.
absl::StatusOr<int> LocalSlots(const std::string* flag);
int ServeLocalController(const std::string& home, const ServeOptions& options, std::ostream& out,
                         std::ostream& err);

// `--package-path DIR` with `--module-name MODULE`, as gcloud takes them: the
// folder that goes on PYTHONPATH (DIR's parent, absolute) so that
// `python3 -m MODULE` finds the package. INVALID_ARGUMENT naming the flag
// when DIR is not a folder (or is a URI such as gs://...), when
// --module-name is missing, or when MODULE is not inside DIR's package (its
// first part must be DIR's name).
absl::StatusOr<std::string> PackageSearchPath(const std::string& package_path,
                                              const std::string* module_name);

// Starts `kubetrain local serve --exit-when-idle` in the background (its own
// session, output to $KUBETRAIN_HOME/controller.log) unless a controller runs.
absl::Status EnsureLocalController(const std::string& home);

}  // namespace kubetrain::cli
