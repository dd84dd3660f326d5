#pragma once

// spec.outputStorage: the storage jobDir lives on, on Kubernetes. Checks of
// the field (part of api::Validate) and the reading of spec.template's own
// volume mounts, shared by validation and the operator (which mounts the
// storage at jobDir and tells, in status.outputLocation, where outputs go).

#include <optional>
#include <string>
#include <vector>

#include "api/field_error.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::api {

// A volume that spec.template's training container (named "kubetrain", or
// unnamed) mounts at or above a folder.
struct TemplateMount {
  std::string volume_name;
  std::string mount_path;  // as the template gives it
  std::string sub_path;    // the mount's subPath, "" when none
  // The volume, found in spec.template.spec.volumes, is an emptyDir: per pod.
  bool empty_dir = false;
  bool volume_found = false;  // false: not in spec.template.spec.volumes
};

// The deepest mount of spec.template's training container that holds
// `folder` (mountPath == folder, or folder inside it); nullopt when none, or
// when `folder` is not absolute. Per-role templates are not read: storage for
// outputs must reach every replica.
std::optional<TemplateMount> TemplateMountFor(const v1::TrainingJobSpec& spec,
                                              const std::string& folder);

// The folder a job's replicas write their outputs to: trainingInput.jobDir,
// else the last --output_path / --job-dir / --job_dir in trainingInput.args
// ("" when none: the trainer keeps nothing).
std::string OutputFolder(const v1::TrainingInput& input);

// Appends the errors of spec.outputStorage (paths "spec.outputStorage...",
// "spec.trainingInput.jobDir"): exactly one of claimName, volumeName and
// newClaim; jobDir set, absolute and not "/"; names that Kubernetes accepts;
// a volumeName that spec.template defines and that is no emptyDir; a
// subPath that stays inside the volume; a size that is a positive quantity;
// and no mount of spec.template's own at jobDir.
void ValidateOutputStorage(const v1::TrainingJobSpec& spec, std::vector<FieldError>* errors);

}  // namespace kubetrain::api
