#pragma once

// `kubetrain-runtime exec --package P`: the trainer packages a command needs,
// made importable before it starts (trainingInput.packageUris, see
// api/packages.h and operator/core/python_module.h).
//
//   - a folder goes on the command's PYTHONPATH as it is (what `jobs submit
//     training --package-path` gives the local backend);
//   - a file (an sdist or a wheel) or an http(s):// URL is installed with pip
//     into a virtual environment of its own, made with --system-site-packages
//     so that what the image has (numpy, torch, ...) serves as dependencies.
//     The command runs with that environment's bin/ first on PATH (its
//     python3 is the environment's) and VIRTUAL_ENV set.
//
// Why a virtual environment: Debian's pip refuses to install into the
// system's Python (PEP 668, "externally-managed-environment"), and replicas
// run as a non-root user who could not write there anyway;
// --break-system-packages would do both wrongs. `pip install --target` would
// install every dependency again (it ignores installed packages), and
// `--user` is refused like a system install.
//
// pip runs with --no-build-isolation (an sdist is built with the image's
// setuptools, not one fetched from an index), --no-input and no cache. It
// keeps its own index settings: packages already in the image satisfy
// dependencies without an index; others come from PIP_INDEX_URL (or
// PyPI); PIP_NO_INDEX=1 forbids any download.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::runtime::cmd {

struct PackagePlan {
  std::vector<std::string> search_path;  // folders, in the order given
  std::vector<std::string> installs;     // files and URLs, for one pip install
};

// Sorts the --package values. Errors, with their exit code attached
// (trainer-runtime/exit_codes.h): a URI scheme other than http(s) (usage: the
// operator mounts configmap:// packages and passes their paths), a path that
// does not exist (bad input).
absl::StatusOr<PackagePlan> PlanPackages(const std::vector<std::string>& packages);

// Installs plan.installs with `python` (a name looked up on PATH, or a path)
// into a new virtual environment at `venv`, running venv creation and pip with
// `env` (NAME=VALUE entries; their output goes to this process's stdout and
// stderr). Returns the variables the command needs, to set over its
// environment: PATH and VIRTUAL_ENV when something was installed, PYTHONPATH
// when there are folders (before the `pythonpath` it had). Bad input (exit
// code 3) when the environment cannot be made or pip fails, naming the
// packages; a command that cannot be run is named with its error.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> PreparePackages(
    const PackagePlan& plan, const std::string& python, const std::filesystem::path& venv,
    const std::vector<std::string>& env, const std::string& path, const std::string& pythonpath);

}  // namespace kubetrain::runtime::cmd
