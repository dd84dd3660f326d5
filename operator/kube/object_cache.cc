#include "operator/kube/object_cache.h"

#include "absl/strings/str_cat.h"

namespace kubetrain::kube {

std::string MetaString(const nlohmann::json& object, const char* field) {
  if (!object.is_object()) return "";
  auto md = object.find("metadata");
  if (md == object.end() || !md->is_object()) return "";
  auto v = md->find(field);
  if (v == md->end() || !v->is_string()) return "";
  return v->get<std::string>();
}

std::string LabelValue(const nlohmann::json& object, const std::string& label) {
  if (!object.is_object()) return "";
  auto md = object.find("metadata");
  if (md == object.end() || !md->is_object()) return "";
  auto labels = md->find("labels");
  if (labels == md->end() || !labels->is_object()) return "";
  auto v = labels->find(label);
  if (v == labels->end() || !v->is_string()) return "";
  return v->get<std::string>();
}

std::string ObjectKey(const nlohmann::json& object) {
  std::string name = MetaString(object, "name");
  if (name.empty()) return "";
  std::string ns = MetaString(object, "namespace");
  return ns.empty() ? name : absl::StrCat(ns, "/", name);
}

ObjectCache::ObjectCache(std::string index_label) : index_label_(std::move(index_label)) {}

std::string ObjectCache::IndexKey(const nlohmann::json& object) const {
  std::string value = LabelValue(object, index_label_);
  if (value.empty()) return "";
  return absl::StrCat(MetaString(object, "namespace"), "/", value);
}

void ObjectCache::IndexLocked(const std::string& key, const ObjectPtr& object, bool add) {
  if (index_label_.empty() || object == nullptr) return;
  std::string ik = IndexKey(*object);
  if (ik.empty()) return;
  if (add) {
    index_[ik].insert(key);
  } else {
    auto it = index_.find(ik);
    if (it == index_.end()) return;
    it->second.erase(key);
    if (it->second.empty()) index_.erase(it);
  }
}

ObjectPtr ObjectCache::Get(const std::string& key) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> ObjectCache::List() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<ObjectPtr> out;
  out.reserve(objects_.size());
  for (const auto& [key, object] : objects_) out.push_back(object);
  return out;
}

std::vector<ObjectPtr> ObjectCache::ByIndex(const std::string& ns, const std::string& value) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<ObjectPtr> out;
  auto it = index_.find(absl::StrCat(ns, "/", value));
  if (it == index_.end()) return out;
  for (const std::string& key : it->second) {
    auto obj = objects_.find(key);
    if (obj != objects_.end()) out.push_back(obj->second);
  }
  return out;
}

size_t ObjectCache::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return objects_.size();
}

ObjectPtr ObjectCache::Upsert(ObjectPtr object) {
  std::string key = ObjectKey(*object);
  absl::MutexLock lock(&mu_);
  ObjectPtr& slot = objects_[key];
  ObjectPtr previous = slot;
  IndexLocked(key, previous, false);
  slot = std::move(object);
  IndexLocked(key, slot, true);
  return previous;
}

ObjectPtr ObjectCache::Remove(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return nullptr;
  ObjectPtr previous = it->second;
  IndexLocked(key, previous, false);
  objects_.erase(it);
  return previous;
}

std::vector<ObjectPtr> ObjectCache::Replace(const std::vector<ObjectPtr>& objects) {
  std::map<std::string, ObjectPtr> next;
  for (const ObjectPtr& object : objects) next[ObjectKey(*object)] = object;
  absl::MutexLock lock(&mu_);
  std::vector<ObjectPtr> dropped;
  for (const auto& [key, object] : objects_) {
    if (!next.count(key)) dropped.push_back(object);
  }
  objects_ = std::move(next);
  index_.clear();
  for (const auto& [key, object] : objects_) IndexLocked(key, object, true);
  return dropped;
}

}  // namespace kubetrain::kube
