#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "trainer-runtime/engine/trainer.h"

namespace kubetrain::dist {

// The `evaluator` task (tf.estimator's continuous evaluation): watches
// the folder the chief writes to (options.output_path, or the job's own
// subfolder of it by engine::ResolveOutputFolder's rule) for checkpoints, evaluates each new one on
// the eval set
// (--eval_data_paths, else the training data) and writes "loss" and
// "accuracy" summaries at the checkpoint's step to
// <output_path>/eval_evaluator/, with a log line per checkpoint.
//
// It returns OK once the master has exported the model
// (<output_path>/export/model.pb) and the latest checkpoint has been
// evaluated: the job is over. Looks for new files every `poll`.
//
// Errors: InvalidArgument without --output_path; the engine's errors for bad
// data or a checkpoint that does not fit the model (exit code 3).
absl::Status RunEvaluator(const runtime::engine::TrainerOptions& options, std::ostream& log,
                          absl::Duration poll = absl::Seconds(1));

}  // namespace kubetrain::dist
