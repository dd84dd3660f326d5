#pragma once

#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "kubetrain/v1/training_job.pb.h"
#include "operator/core/reconciler.h"

namespace kubetrain::core {

// The deletes and creates of a ReconcileResult, by kind.
using Deletion = std::variant<DeleteReplica, DeleteService, DeleteClaim>;
using Creation = std::variant<CreateClaim, CreateReplica, CreateService>;

// Where a backend carries out a ReconcileResult: the Kubernetes API
// (operator/kube) or local processes and their store (operator/local).
// CarryOut calls each step at most once, in order, and skips a step that
// has nothing to do. Each step does all it can: a step that fails part-way
// returns its first error (how far it goes after one is the backend's
// choice: the Kubernetes one creates in slow-start batches and stops after
// the first batch with a failure, so a quota error costs a few calls, not
// one per replica).
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // 1. Trials leaving status, into the job's store.
  virtual absl::Status Archive(const std::vector<v1::HyperparameterOutput>& trials) = 0;
  // 2. The job's new status.
  virtual absl::Status WriteStatus(const v1::TrainingJobStatus& status) = 0;
  // 3. Replicas, Services and claims to delete, in the result's order.
  // Deleting what is gone is success.
  virtual absl::Status Delete(const std::vector<Deletion>& deletions) = 0;
  // 4. Objects to create: claims first (replicas mount them), then replicas
  // and Services in the result's order. Creating what exists (and is this
  // job's) is success.
  virtual absl::Status Create(const std::vector<Creation>& creations) = 0;
  // 5. The job's events.
  virtual absl::Status Emit(const std::vector<EmitEvent>& events) = 0;
};

// Carries out `result` through `sink` in the order reconciler.h fixes:
//
//  1. archive: trials leaving status are stored before the status without
//     them is written;
//  2. status, when it changed: a new trial is on record before its replicas
//     exist;
//  3. deletes, then 4. creates, then 5. events.
//
// A failed archive or status write ends it there: nothing after it has
// happened, and the next reconcile computes it all again. Once the status is
// written, deletes, creates and events are each attempted even when an
// earlier one failed (the events tell what the written status did; the next
// reconcile repeats only the deletes and creates that did not happen), and
// the first failure is returned. requeue_after and delete_job are the
// backend's, after CarryOut.
absl::Status CarryOut(const ReconcileResult& result, ResultSink& sink);

}  // namespace kubetrain::core
