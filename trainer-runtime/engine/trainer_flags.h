#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer-runtime/engine/trainer.h"

namespace CLI {
class App;
class ParseError;
}  // namespace CLI

namespace kubetrain::runtime::engine {

// Parses Cloud ML trainer flags into TrainerOptions. Accepts "--name=value"
// and "--name value"; names may use '-' or '_' (--job-dir, --job_dir).
//
//   --train_data_paths --eval_data_paths --output_path (alias --job-dir)
//   --batch_size --learning_rate --optimizer (sgd|momentum|adagrad|adam)
//   --max_steps | --num_epochs --eval_every_secs | --eval_every_steps | --eval_every_epochs
//   --log_every_steps
//   --save_checkpoints_secs --save_checkpoints_steps --keep_checkpoints
//   --seed --threads --model (mlp|cnn|FILE.yaml) --hidden1 --hidden2
//   --eval_batch_size --device (cpu|gpu|auto) --cpu_kernels (onednn|blas)
//
// InvalidArgument (exit code 2: usage) for an unknown flag, a missing value
// or a value that does not parse, naming the flag; also for a URI
// (gs://..., see api/storage_uri.h) given to a path flag (--job-dir,
// --output_path, --train_data_paths, --eval_data_paths, --model): this
// runtime reads and writes local folders only.
absl::StatusOr<TrainerOptions> ParseTrainerFlags(const std::vector<std::string>& args);

// Adds the flags above to `app` (common/flags), each with its help and the
// default from a default TrainerOptions; values land in `*options`, which
// must outlive the parse. A command that takes more flags than these parses
// its arguments once with all of them.
void AddTrainerFlags(CLI::App& app, TrainerOptions* options);

// The error of a parse of `app` in the words ParseTrainerFlags uses
// ("unknown flag '--x'", "flag '--x' needs a value", ...), exit code 2.
absl::Status TrainerFlagsError(const CLI::App& app, const CLI::ParseError& error);

}  // namespace kubetrain::runtime::engine
