#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kubetrain::kube {

// A Kubernetes resource collection: where it lives in the REST API.
struct Resource {
  std::string api_prefix;   // "api/v1" (core) or "apis/<group>/<version>"
  std::string plural;       // "pods"
  std::string kind;         // "Pod"
  std::string api_version;  // "v1", "kubetrain.io/v1"
};

inline const Resource kTrainingJobs{"apis/kubetrain.io/v1", "trainingjobs", "TrainingJob",
                                    "kubetrain.io/v1"};
inline const Resource kPods{"api/v1", "pods", "Pod", "v1"};
inline const Resource kServices{"api/v1", "services", "Service", "v1"};
inline const Resource kPersistentVolumeClaims{"api/v1", "persistentvolumeclaims",
                                              "PersistentVolumeClaim", "v1"};
inline const Resource kEvents{"api/v1", "events", "Event", "v1"};
inline const Resource kConfigMaps{"api/v1", "configmaps", "ConfigMap", "v1"};
inline const Resource kLeases{"apis/coordination.k8s.io/v1", "leases", "Lease",
                              "coordination.k8s.io/v1"};
// What gang admission reads (gang_admission.h): nodes and priority classes
// are cluster-scoped (their namespace is always "").
inline const Resource kNodes{"api/v1", "nodes", "Node", "v1"};
inline const Resource kResourceQuotas{"api/v1", "resourcequotas", "ResourceQuota", "v1"};
inline const Resource kPriorityClasses{"apis/scheduling.k8s.io/v1", "priorityclasses",
                                       "PriorityClass", "scheduling.k8s.io/v1"};

// The PodGroups of the gang schedulers (operator/core/pod_group.h), served
// only where their CRDs are installed.
inline const Resource kCoschedulingPodGroups{"apis/scheduling.x-k8s.io/v1alpha1", "podgroups",
                                             "PodGroup", "scheduling.x-k8s.io/v1alpha1"};
inline const Resource kVolcanoPodGroups{"apis/scheduling.volcano.sh/v1beta1", "podgroups",
                                        "PodGroup", "scheduling.volcano.sh/v1beta1"};

struct ListOptions {
  std::string label_selector{};
  std::string field_selector{};
  int64_t limit = 0;  // 0: everything in one page
  std::string continue_token{};
};

struct WatchOptions {
  std::string label_selector{};
  std::string resource_version{};  // watch changes after this version
  bool allow_bookmarks = true;
  int timeout_seconds = 0;  // server-side watch timeout; 0: the server's default
};

// One watch event: type ADDED, MODIFIED, DELETED, BOOKMARK or ERROR (object is
// then a v1 Status; code 410 means the resourceVersion is too old).
struct WatchEvent {
  std::string type;
  nlohmann::json object;
};

// An open watch. Not thread-safe, except Cancel(), which may be called from
// any thread to unblock Next().
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  // Blocks for the next event. nullopt: the stream ended (server closed it,
  // timeout, or Cancel()). Errors: connection failure, malformed event.
  virtual absl::StatusOr<std::optional<WatchEvent>> Next() = 0;
  virtual void Cancel() = 0;
};

// A container's log (GET pods/NAME/log).
struct LogOptions {
  std::string container{};   // "": the pod's only container
  bool follow = false;       // keep the answer open while the container writes
  bool previous = false;     // the last terminated run, after a restart
  bool timestamps = false;   // each line starts "<RFC 3339 time> "
  std::string since_time{};  // RFC 3339: only lines stamped at or after it
};

// An open log. Not thread-safe, except Cancel(), which may be called from
// any thread to unblock NextLine().
class LogStream {
 public:
  virtual ~LogStream() = default;
  // Blocks for the next line, without its newline. nullopt: the log ended
  // (the container stopped, the server closed it, or Cancel()). Errors: the
  // connection failed.
  virtual absl::StatusOr<std::optional<std::string>> NextLine() = 0;
  virtual void Cancel() = 0;
};

// The Kubernetes API as the operator and the CLI use it: JSON objects in and
// out, and container logs as text.
//
// Errors are absl codes mapped from the HTTP status (see api_status.h):
// NotFound (404), AlreadyExists (409 reason AlreadyExists), Aborted (409
// Conflict: stale resourceVersion), FailedPrecondition with IsGone (410),
// ResourceExhausted (429), Unavailable (5xx and connection failures; retry),
// InvalidArgument (400/422), PermissionDenied/Unauthenticated (403/401).
// Messages carry the verb, the path and the server's Status message.
//
// Implementations are thread-safe.
class ClusterClient {
 public:
  virtual ~ClusterClient() = default;

  virtual absl::StatusOr<nlohmann::json> Get(const Resource& resource, const std::string& ns,
                                             const std::string& name) = 0;
  // A list object ({items, metadata.resourceVersion, metadata.continue}).
  // `ns` empty: all namespaces.
  virtual absl::StatusOr<nlohmann::json> List(const Resource& resource, const std::string& ns,
                                              const ListOptions& options) = 0;
  virtual absl::StatusOr<nlohmann::json> Create(const Resource& resource, const std::string& ns,
                                                const nlohmann::json& object) = 0;
  // PUT of the whole object (metadata.resourceVersion makes it conditional);
  // `status` writes the status subresource.
  virtual absl::StatusOr<nlohmann::json> Update(const Resource& resource, const std::string& ns,
                                                const nlohmann::json& object, bool status) = 0;
  virtual absl::StatusOr<nlohmann::json> MergePatch(const Resource& resource, const std::string& ns,
                                                    const std::string& name,
                                                    const nlohmann::json& patch, bool status) = 0;
  // Background propagation (owned objects are garbage-collected).
  virtual absl::Status Delete(const Resource& resource, const std::string& ns,
                              const std::string& name) = 0;
  // `ns` empty: all namespaces.
  virtual absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& resource,
                                                             const std::string& ns,
                                                             const WatchOptions& options) = 0;
  // A pod's container log (the pods/log subresource; RBAC "get pods/log").
  // Errors as above: the API server answers 400 (InvalidArgument) while the
  // container has not started.
  virtual absl::StatusOr<std::unique_ptr<LogStream>> StreamLog(const std::string& ns,
                                                               const std::string& pod,
                                                               const LogOptions& options) = 0;
};

}  // namespace kubetrain::kube
