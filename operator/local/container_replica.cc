#include "operator/local/container_replica.h"

#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/process/process.h"
#include "operator/local/process_table.h"

namespace kubetrain::local {

std::vector<std::string> ContainerRunArgv(const ContainerRun& run) {
  std::vector<std::string> argv = {run.podman, "run", "--rm", "--replace", "--name", run.name,
                                   // Addresses are 127.0.0.1:<port>, as for processes.
                                   "--network", "host"};
  // A rootless podman maps the container's uid 0 to its user: keep-id maps
  // that user to itself instead, so a uid other than 0 is the user's too.
  if (run.uid != 0) argv.push_back("--userns=keep-id");
  argv.push_back("--user");
  argv.push_back(absl::StrCat(run.uid, ":", run.gid));
  for (const std::string& name : run.env_names) {
    argv.push_back("--env");
    argv.push_back(name);
  }
  for (const std::string& folder : run.mounts) {
    argv.push_back("--volume");
    argv.push_back(absl::StrCat(folder, ":", folder));
  }
  argv.push_back(run.image);
  argv.insert(argv.end(), run.args.begin(), run.args.end());
  return argv;
}

std::string ContainerName(const std::string& home, const std::string& replica_name) {
  // FNV-1a: the same name for the same home in every build and process.
  uint32_t hash = 2166136261u;
  for (unsigned char c : home) {
    hash ^= c;
    hash *= 16777619u;
  }
  return absl::StrFormat("kubetrain-%08x-%s", hash, replica_name);
}

std::string FindPodman() {
  if (const char* named = std::getenv("KUBETRAIN_PODMAN"); named != nullptr && *named != '\0') {
    return named;
  }
  return FindExecutable("podman").value_or("");
}

absl::Status RemoveContainer(const std::string& podman, const std::string& name) {
  absl::StatusOr<process::ExitStatus> removed =
      process::RunToExit({.argv = {podman, "rm", "--force", "--ignore", "--time", "0", name},
                          .in = process::Stream::DevNull(),
                          .out = process::Stream::DevNull(),
                          .err = process::Stream::DevNull()});
  if (!removed.ok()) {
    return absl::UnavailableError(absl::StrCat("removing container ", name, ": cannot run ", podman,
                                               ": ", removed.status().message()));
  }
  if (removed->code() != 0) {
    return absl::UnavailableError(absl::StrCat("removing container ", name, ": `", podman,
                                               " rm --force` failed (exit code ", removed->code(),
                                               ")"));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::local
