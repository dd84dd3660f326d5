#pragma once

// The Python runtime images: what a replica that runs trainingInput.pythonModule
// (and names no imageUri) runs in. trainingInput.runtimeVersion and
// pythonVersion pick one, as they picked Cloud ML's runtime; unset, they mean
// the newest runtime and its Python. Each image is kubetrain-runtime plus
// Debian's Python 3 with pip, built by scripts/build-images.sh (target
// python-runtime of deploy/docker/Dockerfile) and tagged with the project
// version.

#include <string>
#include <vector>

namespace kubetrain::api {

struct PythonRuntime {
  std::string runtime_version;  // kubetrain's major.minor, e.g. "0.1"
  std::string python_version;   // major.minor of the image's python3, e.g. "3.11"
  std::string image;            // e.g. "kubetrain/kubetrain-python-runtime:0.1.0"
};

// Every runtime on offer, newest first.
const std::vector<PythonRuntime>& PythonRuntimes();

// The runtime for `runtime_version` and `python_version` ("" for either: the
// newest runtime, its first Python); null when there is none.
const PythonRuntime* FindPythonRuntime(const std::string& runtime_version,
                                       const std::string& python_version);

// "runtimeVersion 0.1 with pythonVersion 3.11 (kubetrain/kubetrain-python-runtime:0.1.0)",
// one such entry per runtime, for errors that say what is on offer.
std::string PythonRuntimesOnOffer();

}  // namespace kubetrain::api
