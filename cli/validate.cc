// `kubetrain validate FILE...`, `kubetrain convert FILE` and `kubetrain version`.
#include <ostream>

#include "api/codec.h"
#include "api/defaults.h"
#include "api/job_file.h"
#include "cli/commands.h"
#include "cli/local_backend.h"

#ifndef KUBETRAIN_VERSION
#define KUBETRAIN_VERSION "unknown"
#endif

namespace kubetrain::cli {
namespace {

int Validate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ParsedArgs parsed = ParseArgs(args, {{kRuntimeCatalogFlag, "FILE", kRuntimeCatalogFlagHelp}});
  if (!parsed.error.empty()) {
    err << "kubetrain validate: " << parsed.error << "\n";
    return kExitUsage;
  }
  absl::StatusOr<api::PythonRuntimeCatalog> runtimes = CommandRuntimeCatalog(parsed);
  if (!runtimes.ok()) {
    err << "kubetrain validate: " << runtimes.status().message() << "\n";
    return kExitUsage;
  }
  if (parsed.positional.empty()) {
    err << "kubetrain validate: name at least one file: kubetrain validate FILE...\n";
    return kExitUsage;
  }
  bool all_ok = true;
  for (const std::string& path : parsed.positional) {
    absl::StatusOr<std::string> text = api::ReadTextFile(path);
    if (!text.ok()) {
      out << text.status().message() << "\n";
      all_ok = false;
      continue;
    }
    api::CheckedJob checked = api::CheckTrainingJob(*text, true, &*runtimes);
    if (checked.ok() && !checked.kubeflow_kind.empty()) {
      out << path << ": ok (a kubeflow.org/v1 " << checked.kubeflow_kind
          << ", run as the TrainingJob `kubetrain convert` prints)\n"
          << api::FormatMapping(checked.mapped);
    } else if (checked.ok()) {
      out << path << ": ok\n";
    } else {
      out << api::FormatErrors(checked.errors, path);
      all_ok = false;
    }
  }
  return all_ok ? kExitOk : kExitUsage;
}

// `kubetrain convert FILE`: the TrainingJob a Kubeflow TFJob or PyTorchJob
// runs as, in YAML, after comment lines saying where each field went.
int Convert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ParsedArgs parsed = ParseArgs(args, {{kRuntimeCatalogFlag, "FILE", kRuntimeCatalogFlagHelp}});
  if (!parsed.error.empty()) {
    err << "kubetrain convert: " << parsed.error << "\n";
    return kExitUsage;
  }
  absl::StatusOr<api::PythonRuntimeCatalog> runtimes = CommandRuntimeCatalog(parsed);
  if (!runtimes.ok()) {
    err << "kubetrain convert: " << runtimes.status().message() << "\n";
    return kExitUsage;
  }
  if (parsed.positional.size() != 1) {
    err << "kubetrain convert: name one file: kubetrain convert FILE\n";
    return kExitUsage;
  }
  const std::string& path = parsed.positional[0];
  absl::StatusOr<std::string> text = api::ReadTextFile(path);
  if (!text.ok()) {
    err << "kubetrain convert: " << text.status().message() << "\n";
    return kExitUsage;
  }
  api::CheckedJob checked = api::CheckTrainingJob(*text, true, &*runtimes);
  if (checked.kubeflow_kind.empty() && checked.ok()) {
    err << "kubetrain convert: " << path
        << ": not a kubeflow.org/v1 TFJob or PyTorchJob; it runs as it is\n";
    return kExitUsage;
  }
  if (!checked.ok()) {
    err << api::FormatErrors(checked.errors, path);
    err << "kubetrain convert: " << path << " does not convert; nothing was printed\n";
    return kExitUsage;
  }
  out << "# kubetrain convert " << path << ": the kubeflow.org/v1 " << checked.kubeflow_kind
      << " as a TrainingJob\n";
  for (const api::MappedField& field : checked.mapped) {
    out << "#   " << field.from << " -> " << field.to << "\n";
  }
  // int64 fields as numbers, as a Kubernetes manifest writes them (the CRD
  // takes the string form too; numbers read as what they are).
  out << api::EncodeYaml(api::EncodeKubernetesJson(checked.job));
  return kExitOk;
}

int Version(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (!args.empty()) {
    err << "kubetrain version: takes no arguments\n";
    return kExitUsage;
  }
  out << "kubetrain " << KUBETRAIN_VERSION << " (API " << api::kApiVersion << ")\n";
  return kExitOk;
}

}  // namespace

std::vector<Command> ValidateCommands() {
  return {
      {{"validate"},
       "check TrainingJob manifests or Cloud ML config.yaml files",
       Validate,
       "FILE...",
       {{kRuntimeCatalogFlag, "FILE", kRuntimeCatalogFlagHelp}}},
      {{"convert"},
       "print the TrainingJob a Kubeflow TFJob or PyTorchJob runs as",
       Convert,
       "FILE",
       {{kRuntimeCatalogFlag, "FILE", kRuntimeCatalogFlagHelp}}},
      {{"version"}, "print the version", Version, ""},
  };
}

}  // namespace kubetrain::cli
