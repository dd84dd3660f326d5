#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace kubetrain::fake_apiserver {

// An in-process fake Kubernetes API server that speaks the real REST protocol
// over HTTP/1.1 on 127.0.0.1 (port 0 by default), so that the operator's real
// HTTP client, informers and leader election can be tested without a cluster.
//
// Resources (all namespaced):
//   /apis/kubetrain.io/v1/namespaces/NS/trainingjobs[/NAME[/status]]
//   /api/v1/namespaces/NS/pods[/NAME[/status|/log]]
//   /api/v1/namespaces/NS/services[/NAME]
//   /api/v1/namespaces/NS/persistentvolumeclaims[/NAME[/status]]
//   /api/v1/namespaces/NS/events[/NAME]
//   /apis/coordination.k8s.io/v1/namespaces/NS/leases[/NAME]
//   /api/v1/namespaces/NS/configmaps[/NAME]
//   /api/v1/namespaces/NS/resourcequotas[/NAME[/status]]
// and the all-namespace collections (/api/v1/pods, /apis/kubetrain.io/v1/trainingjobs, ...);
// cluster-scoped (stored under the namespace "", reached without /namespaces/NS):
//   /api/v1/nodes[/NAME]
//   /apis/scheduling.k8s.io/v1/priorityclasses[/NAME]
//
// Verbs: GET (get, list with labelSelector / fieldSelector (=, ==, !=) on metadata.name,
// metadata.namespace and, for events, the real server's event field labels
// (involvedObject.kind|name|uid|..., reason, type, source, reportingComponent) /
// limit+continue, watch with ?watch=true&resourceVersion=N&allowWatchBookmarks=true),
// GET pods/NAME/log (container logs, with follow=true streaming: see pod_logs.h),
// POST (create), PUT (update; status subresource for trainingjobs and pods), PATCH
// with application/merge-patch+json (RFC 7386, main resource or /status), DELETE.
//
// Semantics kept from the real server:
//  - one global, monotonic resourceVersion; metadata.uid, creationTimestamp,
//    generation, resourceVersion are set by the server;
//  - create of an existing name -> 409 with a Status of reason AlreadyExists;
//    update/patch carrying a stale metadata.resourceVersion -> 409 reason Conflict;
//  - on trainingjobs, pods and persistentvolumeclaims, writes to the main
//    resource ignore `status` and writes to /status ignore everything but
//    `status`; generation increases when the spec changes; a created pod or
//    claim starts in phase Pending (no scheduler or provisioner moves it on:
//    tests patch the status);
//  - watch events are newline-delimited JSON {type, object} in a chunked
//    response; a watch from a resourceVersion older than the compacted history
//    gets HTTP 200 with one ERROR event carrying a 410 Status (as the real
//    server does), a list/watch without a resourceVersion (or "0") starts
//    with synthetic ADDED events; selector watches turn label changes into
//    ADDED/DELETED as the real watch cache does; BOOKMARK events every
//    `bookmark_interval` when asked for.
//  - a ConfigMap's data and binaryData must map valid keys ([-._a-zA-Z0-9]+)
//    to strings (else 400 / 422 Invalid) and hold at most 1 MiB together
//    (else 422 Invalid "Too long");
//  - errors come back as a v1 Status body with code, reason and message;
//  - get and list answer `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`
//    with a meta.k8s.io/v1 Table computed from the printer columns of a CRD
//    given to ServeCrd (table.h), as `kubectl get` asks; a resource without
//    them falls back to plain JSON when the Accept header allows it, else 406;
//  - GET /version, /api, /api/v1, /apis, /apis/GROUP/VERSION answer legacy discovery,
//    and /openapi/v3[/apis/GROUP/VERSION] the OpenAPI of CRDs given to
//    ServeCrd (discovery.h), so kubectl get and kubectl explain work against it.
//
//  - a pod created in a namespace labelled pod-security.kubernetes.io/enforce
//    (LabelNamespace) passes the Pod Security admission of that level, or is
//    refused 403 Forbidden in the real server's words (pod_security.h);
//  - a pod or Service created in a namespace with a ResourceQuota whose
//    spec.hard caps their count (pods, services, count/pods,
//    count/services) at what the namespace holds is refused 403 Forbidden
//    ("exceeded quota: ..."), as the ResourceQuota admission does; so is a
//    pod whose requests would take the requests of the namespace's pods
//    that are not Succeeded or Failed past a quota's requests.cpu,
//    requests.memory or requests.<extended resource> (or cpu, memory);
//    limits.* keys are not checked;
//  - with Options::schedule_pods, a stand-in for kube-scheduler binds pods
//    to nodes by their requests (scheduler.h), or marks them Unschedulable;
//  - a custom resource whose CRD is served (the TrainingJob CRD is, from the
//    start: Options::serve_training_job_crd) is pruned and validated against
//    the CRD's openAPIV3Schema on every write, status included, as
//    kube-apiserver does for structural schemas (api/structural_schema.h
//    says what of OpenAPI is checked); a refusal is 422 Invalid with the
//    server's message and one cause per field;
//
// Not implemented (on purpose; documented so tests do not rely on it):
//  - authentication other than one bearer token, authorization, TLS, admission
//    other than schema checks and Pod Security,
//    validation of built-in kinds' specs (a pod's or a claim's spec is not
//    checked, nor made immutable), defaulting other than pod and claim phase,
//    the kubernetes.io/pvc-protection finalizer;
//  - strategic-merge-patch, JSON patch, server-side apply, dryRun;
//  - graceful deletion: DELETE removes the object at once (no
//    deletionTimestamp, no finalizers). Owner-referenced dependents in the same
//    namespace are removed with their owner unless propagationPolicy=Orphan
//    (a synchronous stand-in for the garbage collector); owners are matched by
//    uid, as the collector does, so an object of the same name created again
//    (a new uid) owns nothing of its predecessor's. Unlike the collector, a
//    dependent with another owner that still exists goes too (the collector
//    only drops the dangling reference), and an object created with owners
//    that are all gone already stays (the collector deletes it a while later);
//  - resourceVersion on a list (lists always read the latest state);
//  - namespaces as objects (a namespace's labels are set with LabelNamespace),
//    cluster-scoped resources but nodes and priority classes;
//  - consistent list snapshots across pages (each page reads the current
//    state; the continue token is the last name returned);
//  - resourceVersionMatch, sendInitialEvents, timeouts other than
//    timeoutSeconds on watches, protobuf encoding, HTTP/2;
//  - Tables for watches, and server-side printing of built-in resources
//    (pods, services...), which the real server does with its own printers.
//
// Thread safety: every public method may be called from any thread while
// requests are being served.
class FakeApiServer {
 public:
  struct Options {
    int port = 0;  // 0: pick a free port
    absl::Duration bookmark_interval = absl::Seconds(1);
    // Watch events kept for watches that resume from a resourceVersion; older
    // ones are compacted away (-> 410 Gone).
    size_t history_limit = 200000;
    // When set, requests must carry "Authorization: Bearer <token>" (else 401).
    std::string bearer_token{};
    // Serve kubetrain's TrainingJob CRD (api/crd.h) from the start, as a
    // cluster where kubetrain is installed does: every TrainingJob written is
    // pruned and validated against its schema, and kubectl finds its printer
    // columns and short name. False: trainingjobs are stored unchecked until
    // a test calls ServeCrd (for tests of the fake server itself).
    bool serve_training_job_crd = true;
    // A latency model, as a real API server on a small machine behaves
    // (admission, serialisation, etcd's round trip and fsync): every request
    // is delayed `request_latency`, every write (create, update, patch,
    // delete) `write_latency` more, and at most `max_in_flight` requests are
    // served at once, the rest waiting their turn (kube-apiserver's
    // --max-requests-inflight and --max-mutating-requests-inflight, as one
    // limit). Watches and followed logs hold no place, as there. Zero: none.
    absl::Duration request_latency = absl::ZeroDuration();
    absl::Duration write_latency = absl::ZeroDuration();
    int max_in_flight = 0;
    // Schedule pods onto the nodes tests create (Create("nodes", "", ...)
    // with status.allocatable), as kube-scheduler does (scheduler.h says how
    // closely): after every change to pods or nodes, each unbound pod that
    // fits a node is bound there (spec.nodeName, PodScheduled=True) and,
    // as if a kubelet started it, Running; the rest get PodScheduled=False,
    // reason Unschedulable. False: pods stay Pending until a test patches them.
    bool schedule_pods = false;
    // Nodes the server starts with, as every real cluster has some (gang
    // admission reads them): "node-0", ... each with allocatable cpu 1000,
    // memory 4Ti, pods 10000 and nvidia.com/gpu 64, room for any test's jobs.
    // Tests of placement set 0 and create their own.
    int default_nodes = 1;
    // Serve the PodGroups of scheduler-plugins' coscheduling
    // (scheduling.x-k8s.io/v1alpha1) and Volcano (scheduling.volcano.sh/v1beta1),
    // named "podgroups.<group>" here, as a cluster with those schedulers'
    // CRDs does. False: their paths are 404 and discovery lists neither, as
    // on a cluster without them.
    bool pod_group_crds = false;
  };

  static absl::StatusOr<std::unique_ptr<FakeApiServer>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<FakeApiServer>> Start() { return Start(Options()); }
  ~FakeApiServer();  // stops serving, closes every connection, joins threads

  int port() const;
  std::string url() const;  // "http://127.0.0.1:PORT"

  // --- Fault injection ---
  // Ends every open watch stream now (the client sees the connection close).
  void DropWatches();
  // The next `n` requests (watches included) fail with `code` and a Status body,
  // without touching the store.
  void FailNextRequests(int n, int code = 500);
  // Every request waits this long before it is handled (Options::request_latency).
  void SetLatency(absl::Duration latency);
  // Forgets the event history up to now: watches resuming from an older
  // resourceVersion get 410 Gone; open watches are ended with an ERROR 410
  // event, as when the real watch cache falls behind.
  void CompactHistory();

  // Ends every open pods/log stream now; the logs stay (a dropped connection).
  void DropLogStreams();
  // Calls `hook` with the pod's name and the request's parameters as each
  // pods/log request arrives, before it is answered: what a container does
  // between two requests of a client (it writes, crashes, restarts) happens
  // there, at that exact point. The hook may call this server's container
  // and store methods; an empty function removes it.
  using LogRequestHook =
      std::function<void(const std::string& pod, const std::map<std::string, std::string>& query)>;
  void BeforeLogRequests(LogRequestHook hook);

  // --- Namespaces ---
  // Sets the labels of namespace `ns` (replacing any), as `kubectl label ns`
  // does; what the Pod Security admission reads (pod_security.h). Pods
  // already there stay, as on a real cluster.
  void LabelNamespace(absl::string_view ns, std::map<std::string, std::string> labels);

  // --- Custom resource definitions ---
  // Serves a CRD for its resource, which must be one this server stores
  // (trainingjobs): version v1's printer columns in the Table format, its
  // short names and categories in discovery, its schema in OpenAPI v3.
  // InvalidArgument for another resource or a printer column path that is
  // not a simple JSON path.
  absl::Status ServeCrd(const nlohmann::json& crd);

  // --- Container logs (pods/log): the kubelet's side, see pod_logs.h ---
  // Starts `container` of the pod (again, after a restart): an empty log
  // whose lines follow streams receive; the run before it is what
  // previous=true reads. Pod status is unchanged (set it as the kubelet would).
  absl::Status StartContainer(absl::string_view ns, absl::string_view pod,
                              absl::string_view container);
  // Appends one line, or several separated by '\n', to the running log.
  absl::Status AppendLog(absl::string_view ns, absl::string_view pod, absl::string_view container,
                         absl::string_view text);
  // The container exited: streams following its log end after its last line.
  absl::Status StopContainer(absl::string_view ns, absl::string_view pod,
                             absl::string_view container);

  // --- Observation ---
  // Requests served, keyed "VERB RESOURCE[/SUBRESOURCE]" with VERB one of get, list,
  // watch, create, update, patch, delete (e.g. "create pods", "update trainingjobs/status").
  std::map<std::string, int64_t> RequestCounts() const;
  // Creates the server refused, keyed "create RESOURCE CODE" ("create pods
  // 409": a create of what exists; "create pods 403": admission).
  std::map<std::string, int64_t> RefusalCounts() const;
  // Both counts start again from zero.
  void ResetRequestCounts();
  int OpenWatchCount() const;
  // The most requests served at once so far (watches and followed logs not
  // counted): how much concurrency clients used, and whether
  // Options::max_in_flight held them back.
  int PeakInFlight() const;
  int64_t CurrentResourceVersion() const;

  // --- Direct store access for tests (no HTTP, same semantics and events) ---
  // `resource` is the plural ("pods"); `subresource` "" or "status".
  absl::StatusOr<nlohmann::json> Create(absl::string_view resource, absl::string_view ns,
                                        nlohmann::json object);
  absl::StatusOr<nlohmann::json> Get(absl::string_view resource, absl::string_view ns,
                                     absl::string_view name) const;
  absl::StatusOr<nlohmann::json> MergePatch(absl::string_view resource, absl::string_view ns,
                                            absl::string_view name, const nlohmann::json& patch,
                                            absl::string_view subresource = "");
  absl::Status Delete(absl::string_view resource, absl::string_view ns, absl::string_view name);
  // Every object of `resource` in `ns` ("" = all namespaces), sorted by namespace/name.
  std::vector<nlohmann::json> List(absl::string_view resource, absl::string_view ns = "") const;
  size_t Count(absl::string_view resource) const;

  // Blocks until `predicate` is true, re-evaluating it after every change to
  // the store (no polling, no sleeps); false after `timeout`. The predicate
  // runs without the server's lock and may call the methods above.
  bool WaitUntil(const std::function<bool()>& predicate,
                 absl::Duration timeout = absl::Seconds(30));

  class Impl;

 private:
  explicit FakeApiServer(std::unique_ptr<Impl> impl);
  absl::StatusOr<std::string> PodUid(absl::string_view ns, absl::string_view pod) const;
  std::unique_ptr<Impl> impl_;
};

// Writes `dir`/kubeconfig: one context "fake" for the server at
// `server_url`, authenticating with bearer `token`, namespace ns1. Returns
// the file's path.
std::string WriteKubeconfig(const std::string& dir, const std::string& server_url,
                            const std::string& token);

}  // namespace kubetrain::fake_apiserver
