// `kubetrain validate FILE...` and `kubetrain version`.
#include <ostream>

#include "api/codec.h"
#include "api/defaults.h"
#include "api/job_file.h"
#include "cli/commands.h"

#ifndef KUBETRAIN_VERSION
#define KUBETRAIN_VERSION "unknown"
#endif

namespace kubetrain::cli {
namespace {

int Validate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ParsedArgs parsed = ParseArgs(args, {}, {});
  if (!parsed.error.empty()) {
    err << "kubetrain validate: " << parsed.error << "\n";
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
    api::CheckedJob checked = api::CheckTrainingJob(*text);
    if (checked.ok()) {
      out << path << ": ok\n";
    } else {
      out << api::FormatErrors(checked.errors, path);
      all_ok = false;
    }
  }
  return all_ok ? kExitOk : kExitUsage;
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
      {{"validate"}, "check TrainingJob manifests or Cloud ML config.yaml files", Validate,
       "FILE..."},
      {{"version"}, "print the version", Version},
  };
}

}  // namespace kubetrain::cli
