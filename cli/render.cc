// `kubetrain render FILE [--namespace NS] [--trial N] [--name JOB]`: the
// Services and Pods the operator would create for a job, as YAML documents,
// after a comment with each pod's requests (replica_requests.h). The namespace
// is the manifest's metadata.namespace when it has one (as `kubectl apply -f`
// takes it), else --namespace, else "default"; a --namespace that differs from
// the manifest's is an error, as kubectl makes it. A Cloud ML config has no
// name of its own (`jobs submit training JOB` gives it one): --name does.
#include <ostream>

#include "absl/strings/numbers.h"
#include "api/codec.h"
#include "api/job_file.h"
#include "api/validation.h"
#include "cli/commands.h"
#include "cli/local_backend.h"
#include "cli/replica_requests.h"
#include "operator/core/kube_objects.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::cli {
namespace {

std::vector<FlagSpec> RenderFlags() {
  return {
      {"namespace", "NS",
       "the objects' namespace where the manifest names none (default: default)"},
      {"trial", "N", "a tuning job's objects for trial N (default 1)"},
      {"name", "JOB", "a Cloud ML config's job name, as jobs submit training JOB gives it"},
      {kRuntimeCatalogFlag, "FILE", kRuntimeCatalogFlagHelp},
  };
}

int Render(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ParsedArgs parsed = ParseArgs(args, RenderFlags());
  if (!parsed.error.empty()) {
    err << "kubetrain render: " << parsed.error << "\n";
    return kExitUsage;
  }
  if (parsed.positional.size() != 1) {
    err << "kubetrain render: name one file: kubetrain render FILE [--namespace NS] [--trial N] "
           "[--name JOB]\n";
    return kExitUsage;
  }
  const std::string& path = parsed.positional[0];
  int trial = 1;
  if (const std::string* text = parsed.Flag("trial");
      text != nullptr && (!absl::SimpleAtoi(*text, &trial) || trial < 1)) {
    err << "kubetrain render: --trial: a trial number >= 1, got \"" << *text << "\"\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> text = api::ReadTextFile(path);
  if (!text.ok()) {
    err << "kubetrain render: " << text.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<api::PythonRuntimeCatalog> runtimes = CommandRuntimeCatalog(parsed);
  if (!runtimes.ok()) {
    err << "kubetrain render: " << runtimes.status().message() << "\n";
    return kExitUsage;
  }
  api::CheckedJob checked = api::CheckTrainingJob(*text, true, &*runtimes);
  if (!checked.ok()) {
    err << api::FormatErrors(checked.errors, path);
    return kExitUsage;
  }
  const std::string* name = parsed.Flag("name");
  if (checked.bare_config && name == nullptr) {
    err << "kubetrain render: " << path
        << ": a Cloud ML config has no job name (jobs submit training JOB gives it one): "
           "name it with --name JOB\n";
    return kExitUsage;
  }
  if (name != nullptr && !checked.bare_config) {
    err << "kubetrain render: " << path << ": --name is for a Cloud ML config; this file names "
        << "its job itself (metadata.name \"" << checked.job.metadata().name() << "\")\n";
    return kExitUsage;
  }
  if (name != nullptr) {
    if (std::string reason = api::ValidateJobName(*name); !reason.empty()) {
      err << "kubetrain render: --name \"" << *name << "\": " << reason << "\n";
      return kExitUsage;
    }
    checked.job.mutable_metadata()->set_name(*name);
  }
  if (!checked.kubeflow_kind.empty()) {
    // On stderr: stdout stays the objects, for kubectl.
    err << path << ": a kubeflow.org/v1 " << checked.kubeflow_kind
        << ", rendered as the TrainingJob it converts to:\n"
        << api::FormatMapping(checked.mapped);
  }
  core::ReconcileOptions options;
  options.runtimes = std::make_shared<api::PythonRuntimeCatalog>(*std::move(runtimes));
  options.tuner_factory = tuner::Tuner::Create;
  options.stop_rule = tuner::ShouldStopEarly;
  const std::string& manifest_ns = checked.job.metadata().namespace_();
  const std::string* flag_ns = parsed.Flag("namespace");
  if (flag_ns != nullptr && !manifest_ns.empty() && *flag_ns != manifest_ns) {
    err << "kubetrain render: " << path
        << ": the namespace from the manifest (metadata.namespace \"" << manifest_ns
        << "\") does not match --namespace \"" << *flag_ns
        << "\": drop --namespace, or pass --namespace=" << manifest_ns << "\n";
    return kExitUsage;
  }
  const std::string ns = !manifest_ns.empty() ? manifest_ns
                         : flag_ns != nullptr ? *flag_ns
                                              : "default";
  absl::StatusOr<std::vector<nlohmann::json>> objects =
      core::RenderJob(checked.job, ns, trial, options);
  if (!objects.ok()) {
    err << "kubetrain render: " << path << ": " << objects.status().message() << "\n";
    return kExitFailed;
  }
  out << ReplicaRequestsComment(*objects);
  bool first = true;
  for (const nlohmann::json& object : *objects) {
    if (!first) out << "---\n";
    first = false;
    out << api::EncodeYaml(object);
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> RenderCommands() {
  return {{{"render"},
           "print the Kubernetes objects of a job (--namespace, --trial)",
           Render,
           "FILE [--namespace NS] [--trial N]",
           RenderFlags()}};
}

}  // namespace kubetrain::cli
