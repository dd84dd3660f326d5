#include "operator/core/python_module.h"

#include "absl/strings/str_cat.h"
#include "api/packages.h"
#include "api/python_runtimes.h"

namespace kubetrain::core {

bool RunsPythonModule(const v1::TrainingInput& input, const v1::ReplicaConfig& config) {
  return !input.python_module().empty() && config.container_command().empty();
}

PythonModuleRun PlanPythonModule(const v1::TrainingInput& input,
                                 const api::PythonRuntimeCatalog& runtimes) {
  const api::PythonRuntime* runtime =
      runtimes.Find(input.runtime_version(), input.python_version());
  PythonModuleRun run;
  run.image = runtime == nullptr ? "" : runtime->image;
  run.python = runtime == nullptr ? "python3" : runtime->python;
  run.command = {"kubetrain-runtime", "exec"};
  // exec makes the environment it installs packages into with this Python.
  if (run.python != "python3") run.command.insert(run.command.end(), {"--python", run.python});
  for (int i = 0; i < input.package_uris_size(); ++i) {
    const std::string& uri = input.package_uris(i);
    absl::StatusOr<api::PackageSource> source = api::ParsePackageUri(uri);
    run.command.push_back("--package");
    if (!source.ok() || source->kind != api::PackageSource::Kind::kConfigMap) {
      run.command.push_back(uri);
      continue;
    }
    PackageMount mount;
    mount.volume = absl::StrCat("kubetrain-package-", i);
    mount.config_map = source->config_map;
    mount.key = source->file;
    mount.mount_path = absl::StrCat(kPackageMountRoot, "/", i);
    run.command.push_back(absl::StrCat(mount.mount_path, "/", mount.key));
    run.mounts.push_back(std::move(mount));
  }
  run.command.insert(run.command.end(), {"--", run.python, "-m", input.python_module()});
  return run;
}

}  // namespace kubetrain::core
