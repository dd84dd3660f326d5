#pragma once

// Where a job's outputs (checkpoints, summaries, the exported model) go, and
// the storage the operator mounts for them on Kubernetes. Pure: the
// reconciler writes status.outputLocation and each trial's outputPath from
// it and asks for the per-job claim; kube_objects.h renders the volume, the
// mount and the claim.
//
// On Kubernetes every replica has a filesystem of its own that goes with its
// pod. spec.outputStorage names storage that every replica and every
// restart sees, mounted at trainingInput.jobDir in every pod of the job and
// of each trial (a trial writes to <jobDir>/<trialId>), so a recreated
// replica resumes from the last checkpoint there and the evaluator reads the
// chief's checkpoints. Without it (and without a shared volume spec.template
// mounts over jobDir) the outputs are ephemeral and the job carries the
// OutputsEphemeral condition. The local backend's processes share the
// machine's disk: jobDir is used as it is.

#include <optional>
#include <string>

#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::core {

// The pod volume for a claim named in spec.outputStorage (claimName or
// newClaim).
inline constexpr char kOutputVolumeName[] = "kubetrain-output";

// What every pod of a job mounts at jobDir.
struct OutputMount {
  // The pod volume: kOutputVolumeName, or spec.outputStorage.volumeName (a
  // volume spec.template brings).
  std::string volume_name;
  // The claim behind a kOutputVolumeName volume; empty for volumeName.
  std::string claim_name;
  std::string mount_path;  // trainingInput.jobDir
  std::string sub_path;    // spec.outputStorage.subPath
};

// The mount spec.outputStorage asks for; nullopt without it. `job` is valid
// (api::Validate).
std::optional<OutputMount> OutputMountOf(const v1::TrainingJob& job);

// The per-job claim's name (OutputClaimName of the job), or "" when the job
// has no spec.outputStorage.newClaim.
std::string NewOutputClaimName(const v1::TrainingJob& job);

// status.outputLocation: the output folder (api::OutputFolder) and the
// storage under it. `own_filesystems`: the backend gives every replica a
// filesystem of its own (Kubernetes); then the location names the claim or
// volume, or is `ephemeral`. Otherwise (local processes) only `path` is set.
// An empty path (the job writes no outputs) is never ephemeral.
v1::OutputLocation OutputLocationOf(const v1::TrainingJob& job, bool own_filesystems);

// "<location.path>/<trialId>", the folder a trial writes to; "" when the job
// writes no outputs.
std::string TrialOutputPath(const v1::OutputLocation& location, const std::string& trial_id);

// The OutputsEphemeral condition's message for an ephemeral `location`: what
// is lost and how to keep it.
std::string EphemeralOutputsMessage(const v1::OutputLocation& location);

}  // namespace kubetrain::core
