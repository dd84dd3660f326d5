#include "api/python_runtimes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifndef KUBETRAIN_VERSION
#error "KUBETRAIN_VERSION must be the project version (api/CMakeLists.txt)"
#endif
#ifndef KUBETRAIN_RUNTIME_VERSION
#error "KUBETRAIN_RUNTIME_VERSION must be the project's major.minor (api/CMakeLists.txt)"
#endif

namespace kubetrain::api {

const std::vector<PythonRuntime>& PythonRuntimes() {
  // Debian 12's python3 is 3.11: the image's base decides it (the image tests
  // check that the built image's python3 is the version named here).
  static const auto* runtimes = new std::vector<PythonRuntime>{
      {KUBETRAIN_RUNTIME_VERSION, "3.11", "kubetrain/kubetrain-python-runtime:" KUBETRAIN_VERSION},
  };
  return *runtimes;
}

const PythonRuntime* FindPythonRuntime(const std::string& runtime_version,
                                       const std::string& python_version) {
  for (const PythonRuntime& runtime : PythonRuntimes()) {
    if (!runtime_version.empty() && runtime.runtime_version != runtime_version) continue;
    if (!python_version.empty() && runtime.python_version != python_version) continue;
    return &runtime;
  }
  return nullptr;
}

std::string PythonRuntimesOnOffer() {
  return absl::StrJoin(PythonRuntimes(), "; ", [](std::string* out, const PythonRuntime& r) {
    absl::StrAppend(out, "runtimeVersion ", r.runtime_version, " with pythonVersion ",
                    r.python_version, " (", r.image, ")");
  });
}

}  // namespace kubetrain::api
