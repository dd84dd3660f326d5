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

}  // namespace kubetrain::runtime::engine
