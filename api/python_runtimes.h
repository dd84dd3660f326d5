#pragma once

// The Python runtime images: what a replica that runs trainingInput.pythonModule
// (and names no imageUri) runs in. trainingInput.runtimeVersion and
// pythonVersion pick one, as they picked Cloud ML's runtime; unset, they mean
// kubetrain's own runtime and its Python.
//
// kubetrain's own runtime is built in: kubetrain-runtime plus Debian's
// Python 3 with pip, built by scripts/build-images.sh (target python-runtime
// of deploy/docker/Dockerfile) and tagged with the project version. A
// cluster's admin registers more (a TensorFlow 1.15 image for the configs
// that name runtimeVersion 1.15) in a catalog file: the runtimes ConfigMap
// that the Helm chart (value `runtimes`) and deploy/ (kubetrain-runtimes)
// mount into the operator, or $KUBETRAIN_HOME/runtimes.yaml for the local
// backend:
//
//   runtimes:
//   - runtimeVersion: "1.15"
//     pythonVersion: "3.7"
//     image: registry.example.com/tensorflow-runtime:1.15-py3.7
//     python: python3.7        # optional; default python3
//
// A registered pair that is also built in replaces the built-in entry (a
// mirror of kubetrain's image, say).

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::api {

struct PythonRuntime {
  std::string runtime_version;  // e.g. kubetrain's major.minor "0.1", or "1.15"
  std::string python_version;   // major.minor of the image's Python, e.g. "3.11"
  std::string image;            // e.g. "kubetrain/kubetrain-python-runtime:0.1.0"
  // The interpreter the module runs with, in the image (locally: on this
  // machine's PATH).
  std::string python = "python3";
};

// The runtimes on offer where a job runs.
class PythonRuntimeCatalog {
 public:
  // kubetrain's own runtimes alone.
  static const PythonRuntimeCatalog& BuiltIn();

  // The built-in runtimes and those of a catalog file's `text`; `source`
  // (the file) is named in errors and in OnOffer(). Errors name the line and
  // the field.
  static absl::StatusOr<PythonRuntimeCatalog> Parse(std::string_view text,
                                                    const std::string& source);
  // Parse of the file at `path`.
  static absl::StatusOr<PythonRuntimeCatalog> Load(const std::string& path);

  // The runtime for `runtime_version` and `python_version` ("" for either:
  // any; kubetrain's own runtime comes first); null when there is none.
  const PythonRuntime* Find(std::string_view runtime_version,
                            std::string_view python_version) const;

  // "runtimeVersion 0.1 with pythonVersion 3.11 (kubetrain/kubetrain-python-runtime:0.1.0)",
  // one such entry per runtime, for errors that say what is on offer.
  std::string OnOffer() const;

  // Where the registered runtimes come from: "built in", or the file.
  const std::string& source() const { return source_; }
  const std::vector<PythonRuntime>& runtimes() const { return runtimes_; }

 private:
  std::vector<PythonRuntime> runtimes_;
  std::string source_ = "built in";
};

// What a refusal of an unknown runtime adds: how to register one.
inline constexpr char kRegisterRuntimeHint[] =
    "a cluster's admin registers runtimes in the operator's catalog (deploy/: the "
    "kubetrain-runtimes ConfigMap; Helm: the chart's `runtimes` value), a local user in "
    "$KUBETRAIN_HOME/runtimes.yaml (docs/bring-your-code.md, \"Runtime catalog\")";

// A catalog file, read again when it changes: a mounted ConfigMap is
// replaced in place when the cluster's admin edits it, and a running
// operator (or local controller) picks the new runtimes up without a
// restart. Thread-safe.
class RuntimeCatalogFile {
 public:
  // `report` is told, once per version of the file, why that version is
  // refused (the catalog stays as it was) or what it offers. The file is
  // looked at no more often than `look_every`.
  RuntimeCatalogFile(std::string path, std::function<void(const std::string&)> report,
                     std::chrono::steady_clock::duration look_every = std::chrono::seconds(1));

  // The catalog of the file's latest version that read well; the built-in
  // one until one does.
  std::shared_ptr<const PythonRuntimeCatalog> Current();

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  const std::function<void(const std::string&)> report_;
  const std::chrono::steady_clock::duration look_every_;
  std::mutex mu_;
  std::shared_ptr<const PythonRuntimeCatalog> current_;
  std::string version_;  // what identified the file's version last read
  std::chrono::steady_clock::time_point next_look_;
};

}  // namespace kubetrain::api
