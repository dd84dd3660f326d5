#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace kubetrain::kube {

using ObjectPtr = std::shared_ptr<const nlohmann::json>;

// "namespace/name" of an object ("name" when it has no namespace); "" when
// metadata.name is missing.
std::string ObjectKey(const nlohmann::json& object);
std::string MetaString(const nlohmann::json& object, const char* field);  // metadata.<field>
std::string LabelValue(const nlohmann::json& object, const std::string& label);

// The informer's local copy of one resource: objects by key, plus an index on
// one label (e.g. kubetrain.io/job-name) so a job's pods are found without a
// scan. Objects are immutable once stored (shared, never copied on read).
// Thread-safe: written by one informer, read by any number of workers.
class ObjectCache {
 public:
  // `index_label` empty: no index.
  explicit ObjectCache(std::string index_label = "");

  ObjectPtr Get(const std::string& key) const;  // nullptr when absent
  std::vector<ObjectPtr> List() const;
  // Objects in `ns` whose index label equals `value`.
  std::vector<ObjectPtr> ByIndex(const std::string& ns, const std::string& value) const;
  size_t size() const;

  // Stores `object`; returns the previous version (nullptr if new).
  ObjectPtr Upsert(ObjectPtr object);
  // Removes `key`; returns what was there (nullptr if absent).
  ObjectPtr Remove(const std::string& key);
  // Replaces everything with `objects` (a relist). Returns the objects that
  // were dropped (deleted while the watch was down).
  std::vector<ObjectPtr> Replace(const std::vector<ObjectPtr>& objects);

 private:
  std::string IndexKey(const nlohmann::json& object) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void IndexLocked(const std::string& key, const ObjectPtr& object, bool add)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string index_label_;
  mutable absl::Mutex mu_;
  std::map<std::string, ObjectPtr> objects_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::string>> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kubetrain::kube
