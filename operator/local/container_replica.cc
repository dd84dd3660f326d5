#include "operator/local/container_replica.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

extern char** environ;

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
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path == nullptr ? "" : path, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(dir, "/podman");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::Status RemoveContainer(const std::string& podman, const std::string& name) {
  std::vector<std::string> args = {podman, "rm", "--force", "--ignore", "--time", "0", name};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, podman.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::UnavailableError(absl::StrCat("removing container ", name, ": cannot run ", podman,
                                               ": ", std::strerror(spawned)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(absl::StrCat("removing container ", name, ": `", podman,
                                               " rm --force` failed (status ", status, ")"));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::local
