#include "operator/kube/informer.h"

#include <iostream>

#include "operator/kube/api_status.h"
#include "operator/kube/backoff.h"

namespace kubetrain::kube {

Informer::Informer(ClusterClient* client, InformerOptions options, InformerHandlers handlers)
    : client_(client),
      options_(std::move(options)),
      handlers_(std::move(handlers)),
      cache_(options_.index_label),
      rng_(std::random_device{}()) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (watch_ != nullptr) watch_->Cancel();
  }
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || synced_.load(); };
  // synced_ is set under mu_ (see ListAndReplace), so the condition is re-evaluated.
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return synced_.load();
}

bool Informer::Backoff() {
  ++failures_;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  absl::Duration delay = Jittered(
      ExponentialBackoff(failures_, options_.min_backoff, options_.max_backoff), 0.5, unit(rng_));
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), delay);
  return !stopping_;
}

absl::StatusOr<std::string> Informer::ListAndReplace() {
  ++lists_;
  std::vector<ObjectPtr> objects;
  std::string rv;
  ListOptions list_options{.label_selector = options_.label_selector, .limit = options_.page_size};
  for (;;) {
    auto page = client_->List(options_.resource, options_.ns, list_options);
    if (!page.ok()) return page.status();
    if (page->contains("items") && (*page)["items"].is_array()) {
      for (auto& item : (*page)["items"]) {
        if (!item.is_object() || ObjectKey(item).empty()) continue;
        // A list's items carry no kind; keep the objects uniform with watch events.
        item["kind"] = options_.resource.kind;
        item["apiVersion"] = options_.resource.api_version;
        if (options_.transform) options_.transform(item);
        objects.push_back(std::make_shared<const nlohmann::json>(std::move(item)));
      }
    }
    const nlohmann::json& md = (*page)["metadata"];
    if (rv.empty()) rv = md.is_object() ? md.value("resourceVersion", "") : "";
    std::string next = md.is_object() ? md.value("continue", "") : "";
    if (next.empty()) break;
    list_options.continue_token = next;
  }
  // Deliver the differences as events, then publish.
  std::vector<std::pair<ObjectPtr, ObjectPtr>> updates;  // (old, new)
  for (const ObjectPtr& object : objects)
    updates.emplace_back(cache_.Get(ObjectKey(*object)), object);
  std::vector<ObjectPtr> dropped = cache_.Replace(objects);
  for (const ObjectPtr& object : dropped) {
    if (handlers_.on_delete) handlers_.on_delete(object);
  }
  for (const auto& [old_object, object] : updates) {
    if (old_object == nullptr) {
      if (handlers_.on_add) handlers_.on_add(object);
    } else if (handlers_.on_update) {
      handlers_.on_update(old_object, object);
    }
  }
  // Synced only once the handlers have seen the first list, so a controller
  // that waits for sync has every existing object queued.
  absl::MutexLock lock(&mu_);
  synced_ = true;
  return rv;
}

void Informer::Deliver(const std::string& type, nlohmann::json object) {
  if (ObjectKey(object).empty()) return;
  if (options_.transform) options_.transform(object);
  if (type == "DELETED") {
    ObjectPtr previous = cache_.Remove(ObjectKey(object));
    if (handlers_.on_delete) {
      handlers_.on_delete(previous != nullptr ? previous
                                              : std::make_shared<const nlohmann::json>(object));
    }
    return;
  }
  auto stored = std::make_shared<const nlohmann::json>(std::move(object));
  ObjectPtr previous = cache_.Upsert(stored);
  if (previous == nullptr) {
    if (handlers_.on_add) handlers_.on_add(stored);
  } else if (handlers_.on_update) {
    handlers_.on_update(previous, stored);
  }
}

void Informer::Run() {
  auto stopping = [this] {
    absl::MutexLock lock(&mu_);
    return stopping_;
  };
  std::string rv;
  bool need_list = true;
  while (!stopping()) {
    if (need_list) {
      auto listed = ListAndReplace();
      if (!listed.ok()) {
        std::cerr << "informer " << options_.resource.plural << ": list: " << listed.status()
                  << "\n";
        if (!Backoff()) return;
        continue;
      }
      rv = *listed;
      need_list = false;
      failures_ = 0;
    }
    ++watches_;
    auto watch = client_->Watch(options_.resource, options_.ns,
                                WatchOptions{.label_selector = options_.label_selector,
                                             .resource_version = rv,
                                             .allow_bookmarks = true,
                                             .timeout_seconds = options_.watch_timeout_seconds});
    if (!watch.ok()) {
      if (IsGone(watch.status())) {
        need_list = true;
        continue;
      }
      std::cerr << "informer " << options_.resource.plural << ": watch: " << watch.status() << "\n";
      if (!Backoff()) return;
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      watch_ = watch->get();
    }
    bool failed = false;
    bool received = false;
    for (;;) {
      auto event = (*watch)->Next();
      if (!event.ok()) {
        std::cerr << "informer " << options_.resource.plural << ": " << event.status() << "\n";
        failed = true;
        break;
      }
      if (!event->has_value()) break;  // the server ended the watch: resume from rv
      WatchEvent& e = **event;
      if (e.type == "ERROR") {
        int code = e.object.is_object() ? e.object.value("code", 0) : 0;
        if (code == 410) {
          need_list = true;
        } else {
          failed = true;
        }
        break;
      }
      received = true;
      std::string event_rv = MetaString(e.object, "resourceVersion");
      if (!event_rv.empty()) rv = event_rv;
      failures_ = 0;
      if (e.type == "BOOKMARK") continue;
      if (e.type == "ADDED" || e.type == "MODIFIED" || e.type == "DELETED") {
        Deliver(e.type, std::move(e.object));
      }
    }
    {
      absl::MutexLock lock(&mu_);
      watch_ = nullptr;
    }
    // A watch that ends without a single event is treated as a failure so a
    // server that keeps closing connections is not hammered.
    if ((failed || (!received && !need_list)) && !Backoff()) return;
  }
}

}  // namespace kubetrain::kube
