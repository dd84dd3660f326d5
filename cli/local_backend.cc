#include "cli/local_backend.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/storage_uri.h"
#include "common/cpu_budget/cpu_budget.h"
#include "common/process/process.h"
#include "operator/local/container_replica.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::cli {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

std::string SelfExecutable() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : self.string();
}

// How long an idle background controller waits for new work before exiting.
constexpr absl::Duration kIdleExit = absl::Seconds(5);
constexpr auto kSyncInterval = std::chrono::milliseconds(250);

bool HasUnfinishedJob(local::JobStore* store) {
  absl::StatusOr<std::vector<v1::TrainingJob>> jobs = store->ListJobs();
  if (!jobs.ok()) return true;  // cannot tell: stay
  for (const v1::TrainingJob& job : *jobs) {
    if (!core::IsTerminal(job.status().state())) return true;
  }
  return false;
}

}  // namespace

std::string KubetrainHome() {
  if (const char* home = std::getenv("KUBETRAIN_HOME"); home != nullptr && *home != '\0')
    return home;
  const char* user_home = std::getenv("HOME");
  return absl::StrCat(user_home != nullptr ? user_home : "/tmp", "/.kubetrain");
}

std::string LocalRuntimeCatalogPath(const std::string& home) { return home + "/runtimes.yaml"; }

absl::StatusOr<api::PythonRuntimeCatalog> CommandRuntimeCatalog(const ParsedArgs& parsed) {
  if (const std::string* path = parsed.Flag(kRuntimeCatalogFlag)) {
    return api::PythonRuntimeCatalog::Load(*path);
  }
  const std::string local = LocalRuntimeCatalogPath(KubetrainHome());
  std::error_code ec;
  if (std::filesystem::exists(local, ec)) return api::PythonRuntimeCatalog::Load(local);
  return api::PythonRuntimeCatalog::BuiltIn();
}

absl::StatusOr<std::unique_ptr<local::JobStore>> OpenLocalStore(const std::string& home) {
  std::error_code ec;
  std::filesystem::create_directories(home, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create KUBETRAIN_HOME ", home, ": ", ec.message()));
  }
  return local::JobStore::Open(home + "/jobs.db");
}

bool UseLocalBackend(const ParsedArgs& parsed) {
  if (parsed.Has("local")) return parsed.Switch("local");
  const char* backend = std::getenv("KUBETRAIN_BACKEND");
  return backend != nullptr && std::string(backend) == "local";
}

std::string RuntimeBinary() {
  if (const char* runtime = std::getenv("KUBETRAIN_RUNTIME");
      runtime != nullptr && *runtime != '\0') {
    return runtime;
  }
  const std::filesystem::path self = SelfExecutable();
  if (!self.empty()) {
    for (const std::filesystem::path& candidate :
         {self.parent_path() / "kubetrain-runtime",
          self.parent_path().parent_path() / "trainer-runtime" / "cmd" / "kubetrain-runtime"}) {
      if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return "kubetrain-runtime";
}

absl::StatusOr<int> LocalSlots(const std::string* flag) {
  auto parse = [](const std::string& text, const std::string& what) -> absl::StatusOr<int> {
    int slots = 0;
    if (!absl::SimpleAtoi(text, &slots) || slots < 0 || slots > 1000) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": a whole number of process slots from 0 (no limit) to 1000, got \"", text, "\""));
    }
    return slots;
  };
  if (flag != nullptr) return parse(*flag, "--slots");
  if (const char* env = std::getenv("KUBETRAIN_LOCAL_SLOTS"); env != nullptr && *env != '\0') {
    return parse(env, "KUBETRAIN_LOCAL_SLOTS");
  }
  return std::max(1, cpu_budget::AffinityCpuCount());
}

int ServeLocalController(const std::string& home, const ServeOptions& options, std::ostream& out,
                         std::ostream& err) {
  absl::StatusOr<std::unique_ptr<local::ControllerLock>> lock =
      local::ControllerLock::TryAcquire(home);
  if (!lock.ok()) {
    err << "kubetrain local serve: " << lock.status().message() << "\n";
    return 1;
  }
  if (*lock == nullptr) {
    if (!options.quiet_if_running) {
      err << "kubetrain local serve: a local controller already runs for " << home << " (pid in "
          << home << "/controller.lock)\n";
    }
    return options.quiet_if_running ? 0 : 1;
  }
  absl::StatusOr<std::unique_ptr<local::JobStore>> store = OpenLocalStore(home);
  if (!store.ok()) {
    err << "kubetrain local serve: " << store.status().message() << "\n";
    return 1;
  }
  local::RealProcessLauncher launcher;
  local::ControllerOptions controller_options;
  controller_options.home = home;
  controller_options.runtime_binary = RuntimeBinary();
  controller_options.tuner_factory = tuner::Tuner::Create;
  controller_options.stop_rule = tuner::ShouldStopEarly;
  controller_options.machine_gpus = local::MachineGpuCount();
  controller_options.slots = options.slots;
  controller_options.podman = local::FindPodman();
  api::RuntimeCatalogFile runtime_catalog(
      LocalRuntimeCatalogPath(home), [&err, home](const std::string& message) {
        // Quiet about a missing file: most machines register nothing.
        std::error_code ec;
        if (!std::filesystem::exists(LocalRuntimeCatalogPath(home), ec)) return;
        err << "kubetrain local controller: " << message << std::endl;
      });
  controller_options.runtime_catalog = &runtime_catalog;
  local::Controller controller(store->get(), &launcher, controller_options);

  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  out << "kubetrain local controller: serving " << home << " (pid " << getpid() << ")" << std::endl;
  absl::Time idle_since = absl::Now();
  std::string last_error;
  while (!g_stop.load()) {
    absl::StatusOr<int> active = controller.SyncAll();
    if (!active.ok()) {
      // Logged once per distinct error; the next sync tries again.
      if (std::string(active.status().message()) != last_error) {
        last_error = std::string(active.status().message());
        err << "kubetrain local controller: " << last_error << std::endl;
      }
    } else {
      last_error.clear();
    }
    if (!active.ok() || *active > 0) {
      idle_since = absl::Now();
    } else if (options.exit_when_idle && absl::Now() - idle_since > kIdleExit) {
      // Give up the lock, then look once more: a job submitted while the
      // lock was still held (so its submitter started no controller) is
      // picked up by taking the lock back.
      lock->reset();
      if (!HasUnfinishedJob(store->get())) break;
      lock = local::ControllerLock::TryAcquire(home);
      if (!lock.ok() || *lock == nullptr) break;  // another controller took over
      idle_since = absl::Now();
    }
    std::this_thread::sleep_for(kSyncInterval);
  }
  out << "kubetrain local controller: stopped" << std::endl;
  return 0;
}

absl::StatusOr<std::string> PackageSearchPath(const std::string& package_path,
                                              const std::string* module_name) {
  // gcloud took a gs:// package path; here it would be a folder named "gs:".
  if (!api::UriScheme(package_path).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--package-path: ", api::UriNotSupported(package_path)));
  }
  std::error_code ec;
  const std::filesystem::path package =
      std::filesystem::absolute(package_path, ec).lexically_normal();
  if (ec || !std::filesystem::is_directory(package, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--package-path: ", package_path, " is not a folder (the trainer's Python package)"));
  }
  // "/x/trainer/" normalises to "/x/trainer/" with an empty file name.
  const std::filesystem::path dir = package.has_filename() ? package : package.parent_path();
  if (module_name == nullptr || module_name->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--package-path needs --module-name, the module to run (e.g. ",
                     dir.filename().string(), ".task)"));
  }
  const std::string top = module_name->substr(0, module_name->find('.'));
  if (top != dir.filename().string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--module-name ", *module_name, " is not in the package at ", dir.string(),
        ": its first part must be the package's folder name \"", dir.filename().string(), "\""));
  }
  return dir.parent_path().string();
}

absl::Status EnsureLocalController(const std::string& home) {
  if (local::ControllerLock::Held(home)) return absl::OkStatus();
  const std::string self = SelfExecutable();
  if (self.empty())
    return absl::InternalError("cannot find the kubetrain executable (/proc/self/exe)");
  const std::string log = home + "/controller.log";
  // A daemon: in a session of its own, not this command's child, so that it
  // outlives the command and no terminal's signals reach it.
  absl::Status started = process::SpawnDetached({
      .argv = {self, "local", "serve", "--exit-when-idle", "--quiet-if-running"},
      .in = process::Stream::DevNull(),
      .out = process::Stream::File(log, /*append=*/true),
      .err = process::Stream::SameAsStdout(),
  });
  if (!started.ok()) {
    return absl::Status(started.code(),
                        absl::StrCat("cannot start the local controller: ", started.message()));
  }
  // Wait (briefly) until it holds the lock, so that the next command sees it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!local::ControllerLock::Held(home) && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::cli
