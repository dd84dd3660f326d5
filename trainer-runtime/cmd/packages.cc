#include "trainer-runtime/cmd/packages.h"

#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/packages.h"
#include "api/storage_uri.h"
#include "common/process/process.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime::cmd {
namespace {

namespace fs = std::filesystem;

// PATH when the environment has none (POSIX's default search path).
constexpr char kDefaultPath[] = "/usr/local/bin:/usr/bin:/bin";

absl::Status BadInput(const std::string& message) {
  return WithExitCode(absl::InvalidArgumentError(message), kExitBadInput);
}

// Runs `argv` with `env` to its end; its exit code, or 128+N after signal N.
absl::StatusOr<int> RunToEnd(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env) {
  absl::StatusOr<process::ExitStatus> status =
      process::RunToExit({.argv = argv, .env = env, .search_path = true});
  if (!status.ok()) {
    if (absl::IsInternal(status.status())) return status.status();  // waiting for it
    return BadInput(std::string(status.status().message()));
  }
  return status->code();
}

}  // namespace

absl::StatusOr<PackagePlan> PlanPackages(const std::vector<std::string>& packages) {
  PackagePlan plan;
  for (const std::string& package : packages) {
    absl::StatusOr<api::PackageSource> source = api::ParsePackageUri(package);
    if (!source.ok()) {
      return WithExitCode(
          absl::InvalidArgumentError(absl::StrCat("--package: ", source.status().message())),
          kExitUsage);
    }
    switch (source->kind) {
      case api::PackageSource::Kind::kUrl:
        plan.installs.push_back(package);
        break;
      case api::PackageSource::Kind::kConfigMap:
        return WithExitCode(
            absl::InvalidArgumentError(absl::StrCat(
                "--package ", package,
                ": a package stored in a ConfigMap is a file in the pods of its cluster, where the "
                "operator mounts it and passes its path; elsewhere give the file itself")),
            kExitUsage);
      case api::PackageSource::Kind::kPath: {
        std::error_code ec;
        const fs::path path = fs::absolute(package, ec).lexically_normal();
        const fs::file_status status = fs::status(path, ec);
        if (fs::is_directory(status)) {
          plan.search_path.push_back(path.string());
        } else if (fs::exists(status)) {
          plan.installs.push_back(path.string());
        } else {
          return BadInput(absl::StrCat("--package ", package, ": no such file or folder"));
        }
        break;
      }
    }
  }
  return plan;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> PreparePackages(
    const PackagePlan& plan, const std::string& python, const fs::path& venv,
    const std::vector<std::string>& env, const std::string& path, const std::string& pythonpath) {
  std::vector<std::pair<std::string, std::string>> vars;
  if (!plan.installs.empty()) {
    absl::StatusOr<int> made = RunToEnd(
        {python, "-m", "venv", "--without-pip", "--system-site-packages", venv.string()}, env);
    if (!made.ok()) return made.status();
    if (*made != 0) {
      return BadInput(absl::StrCat("cannot make a Python environment at ", venv.string(), ": ",
                                   python, " -m venv exited with ", *made));
    }
    const std::string venv_python = (venv / "bin" / "python3").string();
    std::vector<std::string> pip = {venv_python,
                                    "-m",
                                    "pip",
                                    "install",
                                    "--no-build-isolation",
                                    "--no-input",
                                    "--no-cache-dir",
                                    "--disable-pip-version-check",
                                    "--progress-bar=off",
                                    "--root-user-action=ignore"};
    pip.insert(pip.end(), plan.installs.begin(), plan.installs.end());
    absl::StatusOr<int> installed = RunToEnd(pip, env);
    if (!installed.ok()) return installed.status();
    if (*installed != 0) {
      return BadInput(absl::StrCat("pip could not install ", absl::StrJoin(plan.installs, ", "),
                                   ": it exited with ", *installed, " (its output is above)"));
    }
    vars.emplace_back(
        "PATH", absl::StrCat((venv / "bin").string(), ":", path.empty() ? kDefaultPath : path));
    vars.emplace_back("VIRTUAL_ENV", venv.string());
  }
  if (!plan.search_path.empty()) {
    std::string joined = absl::StrJoin(plan.search_path, ":");
    if (!pythonpath.empty()) absl::StrAppend(&joined, ":", pythonpath);
    vars.emplace_back("PYTHONPATH", joined);
  }
  return vars;
}

}  // namespace kubetrain::runtime::cmd
