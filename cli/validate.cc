// `kubetrain validate FILE...`, `kubetrain convert FILE` and `kubetrain version`.
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "api/job_file.h"
#include "api/kubeflow.h"
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
    } else if (checked.ok() && api::LeavesParamsToResumedJob(checked.job)) {
      out << path << ": ok (its params, goal and hyperparameterMetricTag are those of job \""
          << checked.job.spec().training_input().hyperparameters().resume_previous_job_id()
          << "\", which it resumes: jobs submit training copies them)\n";
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
  // A file of several documents (a Service or a ConfigMap beside the job,
  // as kubectl applies them together): each Kubeflow job converts, the
  // others pass through as written.
  std::vector<api::YamlDocumentText> documents;
  for (const api::YamlDocumentText& document : api::SplitYamlDocuments(*text)) {
    if (!document.empty) documents.push_back(document);
  }
  if (documents.size() <= 1) documents = {{*text, 1, false}};
  std::vector<std::string> printed;
  bool converted = false, refused = false;
  // Errors of one document, at their lines in the file.
  auto report = [&](std::vector<api::FieldError> errors, const api::YamlDocumentText& document) {
    for (api::FieldError& error : errors) {
      if (error.line > 0) error.line += document.first_line - 1;
    }
    err << api::FormatErrors(errors, path);
    refused = true;
  };
  for (const api::YamlDocumentText& document : documents) {
    if (documents.size() > 1) {
      // Another kind passes through, if it reads at all.
      api::DecodedDocument decoded = api::DecodeDocument(document.text);
      if (!decoded.errors.empty()) {
        report(std::move(decoded.errors), document);
        continue;
      }
      if (!api::IsKubeflowManifest(decoded.value)) {
        printed.emplace_back(document.text);
        continue;
      }
    }
    api::CheckedJob checked = api::CheckTrainingJob(document.text, true, &*runtimes);
    if (checked.kubeflow_kind.empty() && checked.ok()) {
      err << "kubetrain convert: " << path
          << ": not a kubeflow.org/v1 TFJob or PyTorchJob; it runs as it is\n";
      return kExitUsage;
    }
    if (!checked.ok()) {
      report(std::move(checked.errors), document);
      continue;
    }
    converted = true;
    std::string job =
        absl::StrCat("# kubetrain convert ", path,
                     documents.size() > 1 ? absl::StrCat(" (line ", document.first_line, ")") : "",
                     ": the kubeflow.org/v1 ", checked.kubeflow_kind, " as a TrainingJob\n");
    for (const api::MappedField& field : checked.mapped) {
      absl::StrAppend(&job, "#   ", field.from, " -> ", field.to, "\n");
    }
    // int64 fields as numbers, as a Kubernetes manifest writes them (the CRD
    // takes the string form too; numbers read as what they are).
    absl::StrAppend(&job, api::EncodeYaml(api::EncodeKubernetesJson(checked.job)));
    printed.push_back(std::move(job));
  }
  if (refused) {
    err << "kubetrain convert: " << path << " does not convert; nothing was printed\n";
    return kExitUsage;
  }
  if (!converted) {
    err << "kubetrain convert: " << path
        << ": holds no kubeflow.org/v1 TFJob or PyTorchJob; it runs as it is\n";
    return kExitUsage;
  }
  for (size_t i = 0; i < printed.size(); ++i) {
    if (i > 0) out << "---\n";
    out << printed[i];
    if (!printed[i].empty() && printed[i].back() != '\n') out << "\n";
  }
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
