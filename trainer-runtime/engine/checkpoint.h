#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kubetrain/v1/graph.pb.h"

namespace kubetrain::runtime::engine {

// Checkpoints in an output folder, laid out as TensorFlow's Saver did:
//   <dir>/model.ckpt-<step>   a kubetrain.v1.Checkpoint (binary proto)
//   <dir>/checkpoint          the index, in TensorFlow's text form:
//       model_checkpoint_path: "model.ckpt-200"
//       all_model_checkpoint_paths: "model.ckpt-100"
//       all_model_checkpoint_paths: "model.ckpt-200"
//
// Every file is written atomically: to a temporary name in the same folder,
// fsync'd, renamed over the final name, then the folder is fsync'd. A crash
// at any point leaves either the old or the new file, never a torn one, and
// the index names only checkpoints that are complete on disk.

std::string CheckpointFileName(int64_t step);  // "model.ckpt-<step>"

// Writes `content` to `path` atomically (see above). Errors name the path.
absl::Status WriteFileAtomically(const std::string& path, const std::string& content);

// Writes the checkpoint for checkpoint.global_step(), updates the index and
// deletes the oldest checkpoints beyond `keep` (keep <= 0: keep all).
absl::Status SaveCheckpoint(const std::string& dir, const v1::Checkpoint& checkpoint, int keep = 5);

// The path of the latest checkpoint in `dir`: the one the index names, or
// (no index) the highest-numbered model.ckpt-* file; nullopt when there is
// none (a fresh run).
absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& dir);

// DataLoss naming the file when it is unreadable or not a checkpoint.
absl::StatusOr<v1::Checkpoint> ReadCheckpoint(const std::string& path);

// ---- Output folders: whose checkpoints a run restores ----------------------
//
// Every checkpoint names its owner (v1::CheckpointOwner: job uid and name,
// trial id, model fingerprint). A run restores only its own, so a job never
// continues another job's weights, however alike their models are:
//
//   1. The run's latest checkpoint in the requested folder (--output_path,
//      for a trial <jobDir>/<trialId>) is its own, or there is none: the run
//      uses that folder (and resumes from its own checkpoint). A replica of
//      a job restarted or recreated (same job uid, same trial) resumes so.
//   2. A run of a job (job uid set) that finds another owner's checkpoint
//      there (another job, an earlier job of the same name, a run by hand,
//      a checkpoint without owner) leaves that folder alone and uses its own
//      subfolder <requested>/<job name>-<uid prefix> (OwnFolderName) from step
//      0, where its restarts find it again by rule 1. The other run's files
//      stay as they were.
//   3. A run by hand (no job uid) resumes from a checkpoint written by hand
//      with the same model fingerprint, and from an ownerless one (written
//      before owners were recorded; the variables' shapes are still
//      checked). Another job's checkpoint or another model's is a usage error
//      naming the folder and the owner: there is no restart loop to avoid, and
//      a person can pick another folder.
//
// The fingerprint names the forward graph (layers, variable names and
// shapes) and the optimizer: a changed learning rate resumes, a changed layer
// width does not. A job's own trial whose fingerprint changed (its model file
// was edited under it) is an error too, never a silent restore.

// 16 hex digits: FNV-1a over the forward graph's text form and the
// optimizer's name. Stable across processes and builds.
std::string ModelFingerprint(const v1::GraphDef& forward_graph, const std::string& optimizer);

// The run's identity as the operator (either backend) gives it to every
// replica: KUBETRAIN_JOB_UID, CLOUD_ML_JOB_ID, CLOUD_ML_TRIAL_ID. All unset:
// a run by hand. No fingerprint (the trainer adds it).
v1::CheckpointOwner CheckpointOwnerFromEnvironment();

// "<job name>-<first 8 hex digits of the uid>": rule 2's subfolder.
std::string OwnFolderName(const v1::CheckpointOwner& me);

// Names an owner for messages: "job 'a' (uid 1234abcd..., trial 3)", "a run
// outside a job", "a run that recorded no owner".
std::string DescribeOwner(const v1::CheckpointOwner& owner);

struct OutputFolder {
  std::string path;  // where the run reads and writes its checkpoints, summaries and export
  // Empty when `path` is the requested folder; else which checkpoint of
  // whom made the run move (for its log).
  std::string moved_because;
  // The run's own latest checkpoint there, to resume from; none: step 0.
  std::optional<v1::Checkpoint> latest;
};

// Applies the rule above to `requested` for the run `me`. An empty
// me.model_fingerprint is not compared (the evaluator, which only reads).
// Errors: DataLoss for an unreadable latest checkpoint (naming it);
// FailedPrecondition for rule 3's refusals and for a job's own checkpoint of
// another model, naming the folder and the owner.
absl::StatusOr<OutputFolder> ResolveOutputFolder(const std::string& requested,
                                                 const v1::CheckpointOwner& me);

}  // namespace kubetrain::runtime::engine
