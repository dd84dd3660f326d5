#pragma once

// The store of a study's archived trials: the ConfigMaps of
// trial_archive_format.h, read through an informer's cache and written
// through the API.

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kubetrain/v1/training_job.pb.h"
#include "nlohmann/json.hpp"
#include "operator/kube/cluster_client.h"
#include "operator/kube/informer.h"
#include "operator/kube/trial_archive_format.h"

namespace kubetrain::kube {

// ---- The store (API calls; a cache of the archives) ----

// Reads from an informer's cache of the archive ConfigMaps (label
// kubetrain.io/archived-trials), writes through the API. Thread-safe.
// Start() once before use, Stop() once (also from the destructor).
class TrialArchive {
 public:
  // `ns`: the namespace the operator watches ("" = all).
  TrialArchive(ClusterClient* client, const std::string& ns);
  ~TrialArchive();

  void Start();
  bool WaitForSync(absl::Duration timeout);
  void Stop();

  // Stores `trials` of `job` (as read from the API: name, namespace, uid) in
  // its ConfigMaps: created when missing, else updated, re-read and retried
  // on a conflict. OK once every one is stored; otherwise the first error,
  // naming the ConfigMap (the caller must then keep the trials in status).
  absl::Status Archive(const v1::TrainingJob& job,
                       const std::vector<v1::HyperparameterOutput>& trials);

  // The trials `job` archived: from the cache, together with what this
  // process stored that the cache does not show yet. When that makes fewer
  // than `expected` (the cache lags behind a write of an earlier leader), the
  // API server is asked directly. Errors only from that list.
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> Trials(const v1::TrainingJob& job,
                                                               size_t expected);

 private:
  std::vector<v1::HyperparameterOutput> FromObjects(const v1::TrainingJob& job,
                                                    const std::vector<ObjectPtr>& objects);

  ClusterClient* const client_;
  std::unique_ptr<Informer> informer_;
  absl::Mutex mu_;
  // Job uid -> trial id -> trial: stored by this process, until the cache
  // shows it.
  std::map<std::string, std::map<std::string, v1::HyperparameterOutput>> written_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kubetrain::kube
