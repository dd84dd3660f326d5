#include "api/python_runtimes.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/job_file.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

#ifndef KUBETRAIN_VERSION
#error "KUBETRAIN_VERSION must be the project version (api/CMakeLists.txt)"
#endif
#ifndef KUBETRAIN_RUNTIME_VERSION
#error "KUBETRAIN_RUNTIME_VERSION must be the project's major.minor (api/CMakeLists.txt)"
#endif

namespace kubetrain::api {
namespace {

std::string At(const std::string& source, const YAML::Mark& mark) {
  if (mark.line < 0) return source;
  return absl::StrCat(source, ":", mark.line + 1);
}

absl::Status Invalid(const std::string& source, const YAML::Node& node, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(At(source, node.Mark()), ": ", what));
}

// A non-empty string scalar (numbers as written: `1.15` is "1.15").
absl::StatusOr<std::string> Text(const std::string& source, const YAML::Node& entry,
                                 const std::string& path, const char* field, bool required) {
  const YAML::Node node = entry[field];
  if (!node.IsDefined() || node.IsNull()) {
    if (!required) return std::string();
    return Invalid(source, entry, absl::StrCat(path, ".", field, ": required"));
  }
  if (!node.IsScalar() || node.Scalar().empty()) {
    return Invalid(source, node, absl::StrCat(path, ".", field, ": must be a non-empty string"));
  }
  return node.Scalar();
}

}  // namespace

const PythonRuntimeCatalog& PythonRuntimeCatalog::BuiltIn() {
  // Debian 12's python3 is 3.11: the image's base decides it (the image tests
  // check that the built image's python3 is the version named here).
  static const auto* built_in = [] {
    auto* catalog = new PythonRuntimeCatalog();
    catalog->runtimes_.push_back({KUBETRAIN_RUNTIME_VERSION, "3.11",
                                  "kubetrain/kubetrain-python-runtime:" KUBETRAIN_VERSION});
    return catalog;
  }();
  return *built_in;
}

absl::StatusOr<PythonRuntimeCatalog> PythonRuntimeCatalog::Parse(std::string_view text,
                                                                 const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(At(source, e.mark), ": not YAML: ", e.msg));
  }
  PythonRuntimeCatalog catalog = BuiltIn();
  catalog.source_ = source;
  if (root.IsNull()) return catalog;  // an empty file registers nothing
  if (!root.IsMap()) return Invalid(source, root, "must be a mapping with a `runtimes` list");
  for (const auto& field : root) {
    if (field.first.Scalar() != "runtimes") {
      return Invalid(source, field.first,
                     absl::StrCat("unknown field \"", field.first.Scalar(),
                                  "\" (a catalog has one: runtimes)"));
    }
  }
  const YAML::Node list = root["runtimes"];
  if (!list.IsDefined() || list.IsNull()) return catalog;
  if (!list.IsSequence()) return Invalid(source, list, "runtimes: must be a list");
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node entry = list[i];
    const std::string path = absl::StrCat("runtimes[", i, "]");
    if (!entry.IsMap()) return Invalid(source, entry, path + ": must be a mapping");
    for (const auto& field : entry) {
      const std::string& name = field.first.Scalar();
      if (name != "runtimeVersion" && name != "pythonVersion" && name != "image" &&
          name != "python") {
        return Invalid(source, field.first,
                       absl::StrCat(path, ": unknown field \"", name,
                                    "\" (known: runtimeVersion, pythonVersion, image, python)"));
      }
    }
    PythonRuntime runtime;
    ASSIGN_OR_RETURN(runtime.runtime_version, Text(source, entry, path, "runtimeVersion", true));
    ASSIGN_OR_RETURN(runtime.python_version, Text(source, entry, path, "pythonVersion", true));
    ASSIGN_OR_RETURN(runtime.image, Text(source, entry, path, "image", true));
    ASSIGN_OR_RETURN(std::string python, Text(source, entry, path, "python", false));
    if (!python.empty()) runtime.python = python;
    if (!seen.emplace(runtime.runtime_version, runtime.python_version).second) {
      return Invalid(
          source, entry,
          absl::StrCat(path, ": runtimeVersion ", runtime.runtime_version, " with pythonVersion ",
                       runtime.python_version, " is registered twice"));
    }
    auto built_in = std::find_if(catalog.runtimes_.begin(), catalog.runtimes_.end(),
                                 [&](const PythonRuntime& r) {
                                   return r.runtime_version == runtime.runtime_version &&
                                          r.python_version == runtime.python_version;
                                 });
    if (built_in != catalog.runtimes_.end()) {
      *built_in = std::move(runtime);
    } else {
      catalog.runtimes_.push_back(std::move(runtime));
    }
  }
  return catalog;
}

absl::StatusOr<PythonRuntimeCatalog> PythonRuntimeCatalog::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return Parse(text, path);
}

const PythonRuntime* PythonRuntimeCatalog::Find(std::string_view runtime_version,
                                                std::string_view python_version) const {
  for (const PythonRuntime& runtime : runtimes_) {
    if (!runtime_version.empty() && runtime.runtime_version != runtime_version) continue;
    if (!python_version.empty() && runtime.python_version != python_version) continue;
    return &runtime;
  }
  return nullptr;
}

std::string PythonRuntimeCatalog::OnOffer() const {
  return absl::StrJoin(runtimes_, "; ", [](std::string* out, const PythonRuntime& r) {
    absl::StrAppend(out, "runtimeVersion ", r.runtime_version, " with pythonVersion ",
                    r.python_version, " (", r.image, ")");
  });
}

RuntimeCatalogFile::RuntimeCatalogFile(std::string path,
                                       std::function<void(const std::string&)> report,
                                       std::chrono::steady_clock::duration look_every)
    : path_(std::move(path)),
      report_(std::move(report)),
      look_every_(look_every),
      current_(std::make_shared<PythonRuntimeCatalog>(PythonRuntimeCatalog::BuiltIn())) {}

std::shared_ptr<const PythonRuntimeCatalog> RuntimeCatalogFile::Current() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_look_) return current_;
  next_look_ = now + look_every_;
  // A version: the file's identity, size and time (a ConfigMap volume swaps
  // in a new file behind a symlink; stat follows it).
  struct stat st;
  std::string version = "missing";
  if (::stat(path_.c_str(), &st) == 0) {
    version = absl::StrCat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".",
                           st.st_mtim.tv_nsec);
  }
  if (version == version_) return current_;
  version_ = version;
  absl::StatusOr<PythonRuntimeCatalog> loaded = PythonRuntimeCatalog::Load(path_);
  if (!loaded.ok()) {
    if (report_) {
      report_(absl::StrCat("runtime catalog ", path_, " not read (the runtimes stay ",
                           current_->source() == "built in" ? "the built-in ones" : "as they were",
                           "): ", loaded.status().message()));
    }
    return current_;
  }
  current_ = std::make_shared<PythonRuntimeCatalog>(*std::move(loaded));
  if (report_) report_(absl::StrCat("runtime catalog ", path_, ": ", current_->OnOffer()));
  return current_;
}

}  // namespace kubetrain::api
