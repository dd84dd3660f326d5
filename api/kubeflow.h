#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/field_error.h"
#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"

namespace kubetrain::api {

// Kubeflow's TFJob and PyTorchJob (kubeflow.org/v1) as the TrainingJob that
// runs them: one CRD and one controller for both, and for Cloud ML configs.
// Pure: text in, a TrainingJob and a report out. docs/kubeflow.md has the
// whole table.
//
// What maps:
// - replica specs -> scaleTier CUSTOM: Chief or Master -> the master (Chief
//   sets useChiefInTfConfig), Worker -> workers, PS -> parameter servers,
//   Evaluator -> evaluators; without Chief or Master, worker 0 becomes the
//   master (a TrainingJob always has one; TF_CONFIG names it chief, as
//   TensorFlow treats worker 0 of a chief-less cluster). Type names match in
//   any case, as Kubeflow's defaulting does.
// - each role's pod template -> its <role>Config (the training container's
//   image, command, args, nvidia.com/gpu as acceleratorConfig; no command:
//   the image's entrypoint runs, as in Kubeflow) and
//   spec.replicaTemplates[<role>] (everything else, the training container
//   renamed "kubetrain"); machine type "pod-template", so the template's
//   resources are the pod's;
// - the tfjob-port / pytorchjob-port -> spec.port (Kubeflow's defaults 2222 /
//   23456 when absent);
// - the replicas' restartPolicy (one for all roles; Kubeflow's defaults Never
//   / OnFailure) and runPolicy (also in its older spelling directly under
//   spec) -> spec.runPolicy; cleanPodPolicy defaults to None, as Kubeflow's;
// - TFJob -> framework TENSORFLOW, PyTorchJob -> PYTORCH;
// - a PyTorchJob's elasticPolicy -> spec.elasticPolicy, nprocPerNode ->
//   spec.nprocPerNode.
// What has no equivalent is an error naming the manifest's field:
// elasticPolicy.metrics (autoscaling) and standalone, successPolicy AllWorkers,
// enableDynamicWorker, replica
// types the kind does not have, roles with differing restart policies or
// ports, unknown fields.

// One field of the manifest and what it became.
struct MappedField {
  std::string from;  // manifest path, e.g. "spec.pytorchReplicaSpecs.Worker.replicas"
  std::string to;    // "spec.trainingInput.workerCount: 2", or what happened to it
};

struct KubeflowConversion {
  // The text is a kubeflow.org manifest (of any kind). When false, nothing
  // else is set: the text is for DecodeTrainingJob.
  bool kubeflow = false;
  std::string kind;  // as the manifest spells it: "TFJob", "PyTorchJob"
  // Not validated: callers run api::Validate as for any TrainingJob.
  v1::TrainingJob job;
  std::vector<MappedField> mapped;  // in manifest order
  // Field paths into the manifest, with line and column.
  std::vector<FieldError> errors;
  // Template placeholders left in the manifest (ManifestPlaceholders), each
  // as an error at its field. Not errors by themselves (Kubernetes stores
  // `image: ${IMAGE}`); where the manifest is refused they are named first,
  // as the likely cause (api::CheckTrainingJob).
  std::vector<FieldError> placeholders;
  bool ok() const { return kubeflow && errors.empty(); }
};

// Converts a kubeflow.org/v1 TFJob or PyTorchJob. Recognised by apiVersion
// "kubeflow.org/..." (IsKubeflowManifest); other versions and kinds are
// errors. Never throws.
KubeflowConversion ConvertKubeflowJob(std::string_view text);

// Whether a decoded manifest (DecodeDocument) is one ConvertKubeflowJob
// converts, or refuses naming its field: apiVersion "kubeflow.org/...", any
// kind but TrainingJob (a TrainingJob with a wrong apiVersion is validation's
// to report).
bool IsKubeflowManifest(const nlohmann::json& document);

// "  from -> to" lines, one per mapped field.
std::string FormatMapping(const std::vector<MappedField>& mapped);

}  // namespace kubetrain::api
