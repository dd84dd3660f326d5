#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "operator/kube/cluster_client.h"
#include "operator/kube/object_cache.h"

namespace kubetrain::kube {

struct InformerOptions {
  Resource resource;
  std::string ns;                // "" = all namespaces
  std::string label_selector{};  // only these objects are listed and watched
  std::string index_label{};     // ObjectCache index
  int64_t page_size = 500;
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(30);
  int watch_timeout_seconds = 0;  // 0: the client's default
  // Applied to every object before it is cached (client-go's TransformFunc):
  // drop what the controller never reads, so 8,000 pods with their TF_CONFIG
  // do not dominate the operator's memory.
  std::function<void(nlohmann::json& object)> transform{};
};

// Callbacks run on the informer's thread, in event order; keep them short
// (map the object to a key and enqueue it). `old_object` of an update may be
// equal to the new one after a relist.
struct InformerHandlers {
  std::function<void(const ObjectPtr& object)> on_add;
  std::function<void(const ObjectPtr& old_object, const ObjectPtr& object)> on_update;
  std::function<void(const ObjectPtr& object)> on_delete;
};

// List + watch of one resource into an ObjectCache (client-go's reflector and
// shared informer, reduced to what the operator needs):
//
//  1. LIST (paged) -> replace the cache; objects that disappeared are
//     delivered as deletes, the rest as adds/updates; HasSynced() turns true.
//  2. WATCH from the list's resourceVersion with bookmarks; every event (and
//     bookmark) advances the resourceVersion.
//  3. The watch ends (server timeout, dropped connection): watch again from
//     the last resourceVersion, without relisting.
//  4. 410 Gone (as an HTTP status or an ERROR event): back to 1.
//  5. Any other failure: wait an exponential backoff with jitter (reset after
//     a successful list/watch), then retry the step that failed.
//
// Thread-safe. Start() once; Stop() (or the destructor) cancels the open watch
// and joins the thread.
class Informer {
 public:
  Informer(ClusterClient* client, InformerOptions options, InformerHandlers handlers);
  ~Informer();

  void Start();
  void Stop();

  // True once the first list is in the cache and its events were delivered.
  bool HasSynced() const { return synced_.load(); }
  // Blocks until the first list is in the cache; false after `timeout` or Stop().
  bool WaitForSync(absl::Duration timeout);

  const ObjectCache& cache() const { return cache_; }

  // For tests and metrics: how many LISTs (relists included) and WATCHes were made.
  int64_t list_count() const { return lists_.load(); }
  int64_t watch_count() const { return watches_.load(); }

 private:
  void Run();
  // Returns the list's resourceVersion, or an error.
  absl::StatusOr<std::string> ListAndReplace();
  // Sleeps the next backoff; false when stopping.
  bool Backoff();
  void Deliver(const std::string& type, nlohmann::json object);

  ClusterClient* const client_;
  const InformerOptions options_;
  const InformerHandlers handlers_;
  ObjectCache cache_;

  std::atomic<bool> synced_{false};
  std::atomic<int64_t> lists_{0}, watches_{0};
  int failures_ = 0;  // consecutive, owned by the thread
  std::mt19937_64 rng_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  WatchStream* watch_ ABSL_GUARDED_BY(mu_) = nullptr;  // the open watch, to cancel
  std::thread thread_;
};

}  // namespace kubetrain::kube
