#include "operator/kube/event_recorder.h"

#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "operator/kube/object_cache.h"

namespace kubetrain::kube {

using nlohmann::json;

EventRecorder::EventRecorder(ClusterClient* client, std::string component)
    : client_(client), component_(std::move(component)) {}

void EventRecorder::Record(const json& involved, Type type, const std::string& reason,
                           const std::string& message) {
  std::string ns = MetaString(involved, "namespace");
  std::string name = MetaString(involved, "name");
  if (name.empty()) return;
  absl::Time now = absl::Now();
  std::string timestamp = absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", now, absl::UTCTimeZone());
  // Unique like client-go's "<name>.<hex nanoseconds>", plus a sequence number
  // so two events in the same nanosecond do not collide.
  std::string event_name =
      absl::StrFormat("%s.%x%x", name, absl::ToUnixNanos(now), sequence_.fetch_add(1));
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", event_name}, {"namespace", ns}}},
                {"involvedObject",
                 {{"kind", involved.value("kind", "")},
                  {"apiVersion", involved.value("apiVersion", "")},
                  {"namespace", ns},
                  {"name", name},
                  {"uid", MetaString(involved, "uid")},
                  {"resourceVersion", MetaString(involved, "resourceVersion")}}},
                {"reason", reason},
                {"message", message},
                {"type", type == Type::kWarning ? "Warning" : "Normal"},
                {"source", {{"component", component_}}},
                {"reportingComponent", component_},
                {"firstTimestamp", timestamp},
                {"lastTimestamp", timestamp},
                {"count", 1}};
  auto created = client_->Create(kEvents, ns, event);
  if (!created.ok()) {
    std::cerr << "event " << reason << " on " << ns << "/" << name
              << " dropped: " << created.status() << "\n";
    return;
  }
  ++recorded_;
}

}  // namespace kubetrain::kube
