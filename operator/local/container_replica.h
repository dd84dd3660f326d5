#pragma once

// How the local backend runs a replica that runs its image's entrypoint (an
// imageUri with no containerCommand, a Kubeflow container without command):
// `podman run` of that image under the replica's supervisor, as a kubelet
// would run the container, but on this machine's network (the replicas'
// addresses are 127.0.0.1:<port>, as for processes).
//
// - The environment is passed by name (`--env NAME`): podman takes each value
//   from its own environment, which the supervisor set from the replica's.
//   So no value (a trial's token, TF_CONFIG) is on a command line.
// - Host folders are mounted at their own paths, read-write: the replica's
//   metrics folder (its CLOUD_ML_HP_METRIC_FILE, which the controller
//   follows) and a jobDir on this machine. Nothing else of the host is seen.
// - The container runs as the user who runs the controller (root maps to
//   the rootless user's own uid), so what it writes there is theirs, whatever
//   USER the image names.
// - `--rm --replace`: a container is removed when it ends, and a replica
//   started again under its name replaces one left behind. The supervisor's
//   SIGTERM reaches the container through podman (signal proxying); a SIGKILL
//   of the supervisor's group does not, so the controller removes the
//   container when it drops the replica's record (RemoveContainer).

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kubetrain::local {

struct ContainerRun {
  std::string podman;  // podman's path
  std::string name;    // ContainerName
  std::string image;
  std::vector<std::string> env_names;  // each once; values from podman's environment
  std::vector<std::string> mounts;     // host folders, mounted at the same path
  std::vector<std::string> args;       // appended to the image's entrypoint
  unsigned uid = 0;
  unsigned gid = 0;
};

// The argv of `podman run` for `run`.
std::vector<std::string> ContainerRunArgv(const ContainerRun& run);

// The name of a replica's container: the replica's name, prefixed with
// "kubetrain-" and a hash of $KUBETRAIN_HOME, so two homes on one machine (two
// users, or tests side by side) never share a container name.
std::string ContainerName(const std::string& home, const std::string& replica_name);

// podman as $KUBETRAIN_PODMAN names it, else found on PATH; "" when there is
// none (the local backend then runs no images, and says so).
std::string FindPodman();

// `podman rm --force --ignore --time 0 NAME`: the container ends at once and
// is gone; none by that name is success. Blocks until podman returns.
absl::Status RemoveContainer(const std::string& podman, const std::string& name);

}  // namespace kubetrain::local
