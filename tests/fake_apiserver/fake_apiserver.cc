#include "tests/fake_apiserver/fake_apiserver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "api/crd.h"
#include "api/structural_schema.h"
#include "tests/fake_apiserver/discovery.h"
#include "tests/fake_apiserver/label_selector.h"
#include "tests/fake_apiserver/pod_logs.h"
#include "tests/fake_apiserver/pod_security.h"
#include "tests/fake_apiserver/scheduler.h"
#include "tests/fake_apiserver/table.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;

struct ResourceInfo {
  const char* plural;
  const char* api_version;  // "v1" or "group/version"
  const char* kind;
  bool has_status;              // status subresource: main writes ignore status and vice versa
  bool cluster_scoped = false;  // stored under the namespace ""; paths without /namespaces/
  // What tests name it by, its StoreKey (FakeApiServer::Create("podgroups.scheduling.volcano.sh",
  // ...)): "plural.group" where two groups serve one plural; the plural otherwise.
  const char* key = nullptr;
  // Served only with Options::pod_group_crds, as where a gang scheduler's
  // CRDs are installed.
  bool pod_group = false;
};

std::string StoreKey(const ResourceInfo& r) { return r.key != nullptr ? r.key : r.plural; }

constexpr ResourceInfo kResources[] = {
    {"trainingjobs", "kubetrain.io/v1", "TrainingJob", true},
    {"pods", "v1", "Pod", true},
    {"services", "v1", "Service", false},
    {"persistentvolumeclaims", "v1", "PersistentVolumeClaim", true},
    {"events", "v1", "Event", false},
    {"leases", "coordination.k8s.io/v1", "Lease", false},
    {"configmaps", "v1", "ConfigMap", false},
    {"resourcequotas", "v1", "ResourceQuota", true},
    // Tests write a node's status.allocatable with it (no kubelet reports it).
    {"nodes", "v1", "Node", false, true},
    {"priorityclasses", "scheduling.k8s.io/v1", "PriorityClass", false, true},
    {"podgroups", "scheduling.x-k8s.io/v1alpha1", "PodGroup", true, false,
     "podgroups.scheduling.x-k8s.io", true},
    {"podgroups", "scheduling.volcano.sh/v1beta1", "PodGroup", true, false,
     "podgroups.scheduling.volcano.sh", true},
};

// The largest ConfigMap the real server stores (validation's
// MaxConfigMapSize: data and binaryData together).
constexpr size_t kMaxConfigMapBytes = 1024 * 1024;

bool IsConfigMapKey(const std::string& key) {
  if (key.empty() || key.size() > 253 || key == "." || key == "..") return false;
  for (char c : key) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

// By the name tests use (StoreKey).
const ResourceInfo* FindResource(absl::string_view key) {
  for (const ResourceInfo& r : kResources) {
    if (key == StoreKey(r)) return &r;
  }
  return nullptr;
}

// By a request's path: its group/version and plural.
const ResourceInfo* FindRoute(absl::string_view api_version, absl::string_view plural) {
  for (const ResourceInfo& r : kResources) {
    if (plural == r.plural && api_version == r.api_version) return &r;
  }
  return nullptr;
}

// An API answer: HTTP code and JSON body (an object or a v1 Status).
struct Reply {
  int code = 200;
  json body;
};

absl::string_view ReasonPhrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

json StatusBody(int code, absl::string_view reason, std::string message, json details = nullptr) {
  json s = {{"kind", "Status"},
            {"apiVersion", "v1"},
            {"metadata", json::object()},
            {"status", "Failure"},
            {"message", std::move(message)},
            {"reason", reason},
            {"code", code}};
  if (!details.is_null()) s["details"] = std::move(details);
  return s;
}

Reply Error(int code, absl::string_view reason, std::string message, json details = nullptr) {
  return Reply{code, StatusBody(code, reason, std::move(message), std::move(details))};
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::map<std::string, std::string> LabelsOf(const json& obj) {
  std::map<std::string, std::string> labels;
  auto md = obj.find("metadata");
  if (md == obj.end() || !md->is_object()) return labels;
  auto l = md->find("labels");
  if (l == md->end() || !l->is_object()) return labels;
  for (auto it = l->begin(); it != l->end(); ++it) {
    if (it.value().is_string()) labels[it.key()] = it.value().get<std::string>();
  }
  return labels;
}

std::string StringAt(const json& obj, absl::string_view a, absl::string_view b) {
  auto x = obj.find(a);
  if (x == obj.end() || !x->is_object()) return "";
  auto y = x->find(b);
  if (y == x->end() || !y->is_string()) return "";
  return y->get<std::string>();
}

std::string PercentDecode(absl::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size()) {
      int v = 0;
      if (absl::SimpleHexAtoi(in.substr(i + 1, 2), &v)) {
        out.push_back(static_cast<char>(v));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && in[i] == '+' ? ' ' : in[i]);
  }
  return out;
}

// The value of a field label (fieldSelector) of `obj`, as the real server's
// selectable fields define it: metadata.name and metadata.namespace on every
// resource; on events also involvedObject.{kind,namespace,name,uid,apiVersion,
// resourceVersion,fieldPath}, reason, type, reportingComponent and source
// (source.component, else reportingComponent). nullopt: not a field label of
// this resource.
std::optional<std::string> FieldLabel(absl::string_view plural, const json& obj,
                                      absl::string_view label) {
  if (label == "metadata.name") return StringAt(obj, "metadata", "name");
  if (label == "metadata.namespace") return StringAt(obj, "metadata", "namespace");
  if (plural != "events") return std::nullopt;
  auto top = [&](const char* key) {
    auto it = obj.find(key);
    return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (absl::ConsumePrefix(&label, "involvedObject.")) {
    for (const char* key :
         {"kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"}) {
      if (label == key) return StringAt(obj, "involvedObject", key);
    }
    return std::nullopt;
  }
  if (label == "reason" || label == "type" || label == "reportingComponent") {
    return top(std::string(label).c_str());
  }
  if (label == "source") {
    const std::string component = StringAt(obj, "source", "component");
    return component.empty() ? top("reportingComponent") : component;
  }
  return std::nullopt;
}

// Which objects a list or watch wants.
struct Filter {
  std::string ns;  // "" = all namespaces
  LabelSelector labels;
  std::string plural;
  struct FieldTerm {
    std::string label, value;
    bool negated = false;  // "!="
  };
  std::vector<FieldTerm> fields;

  bool Matches(const json& obj) const {
    if (!ns.empty() && StringAt(obj, "metadata", "namespace") != ns) return false;
    for (const FieldTerm& term : fields) {
      if ((FieldLabel(plural, obj, term.label).value_or("") == term.value) == term.negated) {
        return false;
      }
    }
    return labels.Matches(LabelsOf(obj));
  }
};

struct WatchEvent {
  int64_t rv;
  const ResourceInfo* resource;
  std::string type;  // ADDED MODIFIED DELETED
  std::shared_ptr<const json> object;
  std::shared_ptr<const json> previous;  // for MODIFIED: the object before
};

struct HttpRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> query;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

bool SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads HTTP/1.1 requests off one connection. Keeps leftover bytes between
// requests (keep-alive, pipelining).
class RequestReader {
 public:
  explicit RequestReader(int fd) : fd_(fd) {}

  // nullopt: connection closed or malformed.
  std::optional<HttpRequest> Next() {
    size_t header_end;
    while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (buffer_.size() > (1 << 20) || !Fill()) return std::nullopt;
    }
    HttpRequest req;
    std::vector<absl::string_view> lines =
        absl::StrSplit(absl::string_view(buffer_).substr(0, header_end), "\r\n");
    std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
    if (first.size() != 3) return std::nullopt;
    req.method = std::string(first[0]);
    absl::string_view target = first[1];
    size_t q = target.find('?');
    req.path = std::string(target.substr(0, q));
    if (q != absl::string_view::npos) {
      for (absl::string_view kv : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
        size_t eq = kv.find('=');
        std::string key = PercentDecode(kv.substr(0, eq), true);
        req.query[key] =
            eq == absl::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1), true);
      }
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      size_t colon = lines[i].find(':');
      if (colon == absl::string_view::npos) continue;
      req.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    buffer_.erase(0, header_end + 4);
    if (absl::EqualsIgnoreCase(req.headers["transfer-encoding"], "chunked")) {
      for (;;) {
        size_t eol;
        while ((eol = buffer_.find("\r\n")) == std::string::npos) {
          if (!Fill()) return std::nullopt;
        }
        int size = 0;
        absl::string_view size_text = absl::string_view(buffer_).substr(0, eol);
        size_text = size_text.substr(0, size_text.find(';'));
        if (!absl::SimpleHexAtoi(size_text, &size) || size < 0) return std::nullopt;
        buffer_.erase(0, eol + 2);
        while (buffer_.size() < static_cast<size_t>(size) + 2) {
          if (!Fill()) return std::nullopt;
        }
        req.body.append(buffer_, 0, size);
        buffer_.erase(0, size + 2);
        if (size == 0) break;
      }
    } else {
      size_t length = 0;
      auto it = req.headers.find("content-length");
      if (it != req.headers.end() && !absl::SimpleAtoi(it->second, &length)) return std::nullopt;
      if (length > (64u << 20)) return std::nullopt;
      while (buffer_.size() < length) {
        if (!Fill()) return std::nullopt;
      }
      req.body = buffer_.substr(0, length);
      buffer_.erase(0, length);
    }
    return req;
  }

 private:
  bool Fill() {
    char chunk[16384];
    for (;;) {
      ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
  }
  int fd_;
  std::string buffer_;
};

}  // namespace

class FakeApiServer::Impl {
 public:
  explicit Impl(Options options) : options_(options), latency_(options.request_latency) {
    // Made once, for every resource: looked up without a lock afterwards.
    for (const ResourceInfo& r : kResources) {
      last_change_[&r] = 0;
      resource_cv_[&r];
    }
  }

  absl::Status Listen() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(options_.port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return absl::UnavailableError(
          absl::StrCat("bind 127.0.0.1:", options_.port, ": ", strerror(errno)));
    }
    if (::listen(listen_fd_, 512) != 0) {
      return absl::InternalError(absl::StrCat("listen: ", strerror(errno)));
    }
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    NotifyEveryWaiter();
    logs_.Shutdown();
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (accept_thread_.joinable()) accept_thread_.join();
    std::list<std::unique_ptr<Connection>> conns;
    {
      std::lock_guard<std::mutex> lock(conn_mu_);
      conns.swap(connections_);
      for (auto& c : conns) ::shutdown(c->fd, SHUT_RDWR);
    }
    NotifyEveryWaiter();
    for (auto& c : conns) {
      c->thread.join();
      ::close(c->fd);
    }
    ::close(listen_fd_);
  }

  int port() const { return port_; }

  // ---- Faults and observation ----
  void DropWatches() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++drop_generation_;
    }
    NotifyEveryWaiter();
  }
  void FailNextRequests(int n, int code) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_ = n;
    fail_code_ = code;
  }
  void SetLatency(absl::Duration latency) {
    std::lock_guard<std::mutex> lock(mu_);
    latency_ = latency;
  }
  void LabelNamespace(const std::string& ns, std::map<std::string, std::string> labels) {
    std::lock_guard<std::mutex> lock(mu_);
    namespace_labels_[ns] = std::move(labels);
  }
  void BeforeLogRequests(FakeApiServer::LogRequestHook hook) {
    std::lock_guard<std::mutex> lock(mu_);
    before_log_request_ = std::move(hook);
  }
  void CompactHistory() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      history_.clear();
      compacted_rv_ = rv_;
      ++compact_generation_;
    }
    NotifyEveryWaiter();
  }
  std::map<std::string, int64_t> RefusalCounts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return refusal_counts_;
  }
  std::map<std::string, int64_t> RequestCounts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return request_counts_;
  }
  void ResetRequestCounts() {
    std::lock_guard<std::mutex> lock(mu_);
    request_counts_.clear();
    refusal_counts_.clear();
  }
  int OpenWatchCount() const {
    std::lock_guard<std::mutex> lock(mu_);
    return open_watches_;
  }
  int PeakInFlight() {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    return peak_in_flight_;
  }
  int64_t CurrentResourceVersion() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rv_;
  }

  // ---- Store operations (callers hold no lock) ----
  Reply Create(const ResourceInfo& res, const std::string& ns, json obj) {
    std::lock_guard<std::mutex> lock(mu_);
    return CreateLocked(res, ns, std::move(obj));
  }

  Reply Get(const ResourceInfo& res, const std::string& ns, const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto& objects = store_.at(StoreKey(res));
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return NotFound(res, name);
    return Reply{200, *it->second};
  }

  Reply List(const ResourceInfo& res, const Filter& filter, size_t limit,
             const std::string& continue_token) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto& objects = store_.at(StoreKey(res));
    json items = json::array();
    auto it = continue_token.empty() ? objects.begin() : objects.upper_bound(continue_token);
    std::string last_key;
    bool more = false;
    for (; it != objects.end(); ++it) {
      if (!filter.Matches(*it->second)) continue;
      if (limit > 0 && items.size() >= limit) {
        more = true;
        break;
      }
      items.push_back(*it->second);
      last_key = it->first;
    }
    json list = {{"kind", absl::StrCat(res.kind, "List")},
                 {"apiVersion", res.api_version},
                 {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                 {"items", std::move(items)}};
    if (more) list["metadata"]["continue"] = last_key;
    return Reply{200, std::move(list)};
  }

  Reply Update(const ResourceInfo& res, const std::string& ns, const std::string& name, json body,
               bool status) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& objects = store_.at(StoreKey(res));
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return NotFound(res, name);
    if (!body.is_object()) return Error(400, "BadRequest", "body must be a JSON object");
    std::string body_name = StringAt(body, "metadata", "name");
    if (!body_name.empty() && body_name != name) {
      return Error(400, "BadRequest",
                   absl::StrCat("the name of the object (", body_name,
                                ") does not match the name on the URL (", name, ")"));
    }
    return ReplaceLocked(res, it->second, std::move(body), status);
  }

  Reply MergePatch(const ResourceInfo& res, const std::string& ns, const std::string& name,
                   const json& patch, bool status) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& objects = store_.at(StoreKey(res));
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return NotFound(res, name);
    if (!patch.is_object()) return Error(400, "BadRequest", "merge patch must be a JSON object");
    json merged = *it->second;
    json effective = patch;
    // Without a resourceVersion in the patch, a merge patch is unconditional.
    if (!effective.contains("metadata") || !effective["metadata"].is_object() ||
        !effective["metadata"].contains("resourceVersion")) {
      merged["metadata"].erase("resourceVersion");
    }
    merged.merge_patch(effective);
    return ReplaceLocked(res, it->second, std::move(merged), status);
  }

  Reply Delete(const ResourceInfo& res, const std::string& ns, const std::string& name,
               bool orphan) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& objects = store_.at(StoreKey(res));
    auto it = objects.find(Key(ns, name));
    if (it == objects.end()) return NotFound(res, name);
    json deleted = DeleteLocked(res, it, orphan);
    return Reply{200, std::move(deleted)};
  }

  std::vector<json> ListAll(const ResourceInfo& res, const std::string& ns) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<json> out;
    for (const auto& [key, obj] : store_.at(StoreKey(res))) {
      if (ns.empty() || StringAt(*obj, "metadata", "namespace") == ns) out.push_back(*obj);
    }
    return out;
  }

  size_t Count(const ResourceInfo& res) const {
    std::lock_guard<std::mutex> lock(mu_);
    return store_.at(StoreKey(res)).size();
  }

  bool WaitUntil(const std::function<bool()>& predicate, absl::Duration timeout) {
    auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
    for (;;) {
      int64_t seen;
      {
        std::lock_guard<std::mutex> lock(mu_);
        seen = rv_;
      }
      if (predicate()) return true;
      std::unique_lock<std::mutex> lock(mu_);
      if (!watch_cv_.wait_until(lock, deadline, [&] { return rv_ != seen || stopping_; })) {
        lock.unlock();
        return predicate();
      }
    }
  }

 private:
  struct Connection {
    int fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  using ObjectMap = std::map<std::string, std::shared_ptr<const json>>;

  static std::string Key(const std::string& ns, const std::string& name) {
    return absl::StrCat(ns, "/", name);
  }

  static Reply NotFound(const ResourceInfo& res, const std::string& name) {
    return Error(404, "NotFound", absl::StrCat(res.plural, " \"", name, "\" not found"),
                 {{"name", name}, {"kind", res.plural}});
  }

  std::string NewUid() {
    uint64_t a = uid_rng_(), b = uid_rng_();
    return absl::StrFormat("%08x-%04x-4%03x-8%03x-%012x", static_cast<uint32_t>(a),
                           static_cast<uint32_t>((a >> 32) & 0xffff),
                           static_cast<uint32_t>((a >> 48) & 0xfff),
                           static_cast<uint32_t>(b & 0xfff), (b >> 12) & 0xffffffffffffULL);
  }

  void Emit(const ResourceInfo& res, std::string type, std::shared_ptr<const json> obj,
            std::shared_ptr<const json> previous) {
    history_.push_back(WatchEvent{rv_, &res, std::move(type), std::move(obj), std::move(previous)});
    while (history_.size() > options_.history_limit) {
      compacted_rv_ = history_.front().rv;
      history_.pop_front();
    }
    // Only the watches of this resource wake (and WaitUntil's callers), as
    // a real server's per-resource watch cache does: each change would
    // otherwise wake every watch of every resource.
    last_change_.at(&res) = rv_;
    resource_cv_.at(&res).notify_all();
    watch_cv_.notify_all();
  }

  void NotifyEveryWaiter() {
    {
      // The lock orders this after any waiter's predicate check.
      std::lock_guard<std::mutex> lock(mu_);
    }
    watch_cv_.notify_all();
    for (auto& [res, cv] : resource_cv_) cv.notify_all();
  }

  enum class Write { kCreate, kUpdate };

  // What the real server's decoding, validation and admission do to an
  // object before it stores it, for the kinds where tests lean on it, in its
  // order: a custom resource whose CRD is served is pruned and validated
  // against the CRD's openAPIV3Schema (structural_schema.h), as
  // kube-apiserver does for every write, status included; a ConfigMap's data
  // must map valid keys to strings, and hold at most 1 MiB; a pod created in
  // a namespace whose labels enforce a Pod Security level passes it
  // (pod_security.h). Called with mu_ held.
  std::optional<Reply> Admit(const ResourceInfo& res, const std::string& ns, json* obj,
                             const std::string& name, Write write) const {
    if (auto crd = served_crds_.find(res.plural);
        crd != served_crds_.end() && !crd->second.schema.is_null()) {
      api::SchemaCheck check = api::PruneAndValidate(crd->second.schema, obj);
      if (!check.ok()) return SchemaRefusal(res, name, check);
      return std::nullopt;
    }
    if (std::optional<Reply> invalid = InvalidConfigMap(res, *obj, name)) return invalid;
    if (write != Write::kCreate) return std::nullopt;
    if (std::optional<Reply> refused = PodSecurityRefusal(res, ns, *obj, name)) return refused;
    return QuotaRefusal(res, ns, *obj, name);
  }

  // The ResourceQuota admission for object counts: a pod or Service created
  // in a namespace where a ResourceQuota's spec.hard caps their number
  // ("pods", "services", "count/pods", "count/services") and the cap is
  // reached is refused 403 Forbidden in the real server's words.
  std::optional<Reply> QuotaRefusal(const ResourceInfo& res, const std::string& ns, const json& obj,
                                    const std::string& name) const {
    const std::string plural = res.plural;
    if (plural != "pods" && plural != "services") return std::nullopt;
    if (plural == "pods") {
      if (std::optional<Reply> refused = ComputeQuotaRefusal(ns, obj, name)) return refused;
    }
    const std::string prefix = ns + "/";
    // How many of `plural` the namespace holds: counted once, when a quota
    // caps them.
    std::optional<size_t> used;
    auto in_namespace = [&] {
      if (!used) {
        const auto& objects = store_.at(plural);
        used = 0;
        for (auto it = objects.lower_bound(prefix);
             it != objects.end() && absl::StartsWith(it->first, prefix); ++it) {
          ++*used;
        }
      }
      return *used;
    };
    const auto& quotas = store_.at("resourcequotas");
    for (auto it = quotas.lower_bound(prefix);
         it != quotas.end() && absl::StartsWith(it->first, prefix); ++it) {
      const json& quota = *it->second;
      const json hard = quota.value("spec", json::object()).value("hard", json::object());
      for (const std::string& key : {plural, "count/" + plural}) {
        auto limit_field = hard.find(key);
        if (limit_field == hard.end()) continue;
        int64_t limit = 0;
        if (limit_field->is_number_integer()) {
          limit = limit_field->get<int64_t>();
        } else if (!limit_field->is_string() ||
                   !absl::SimpleAtoi(limit_field->get<std::string>(), &limit)) {
          continue;  // not a count this fake reads
        }
        if (static_cast<int64_t>(in_namespace()) + 1 <= limit) continue;
        return Error(403, "Forbidden",
                     absl::StrCat(plural, " \"", name, "\" is forbidden: exceeded quota: ",
                                  StringAt(quota, "metadata", "name"), ", requested: ", key,
                                  "=1, used: ", key, "=", *used, ", limited: ", key, "=", limit),
                     {{"name", name}, {"kind", plural}});
      }
    }
    return std::nullopt;
  }

  // The ResourceQuota admission for compute resources: a pod whose requests
  // (scheduler.h PodRequests) would take the namespace's pods that hold
  // resources past a quota's requests.cpu, requests.memory or
  // requests.<extended resource> (cpu and memory are the same as
  // requests.cpu and requests.memory) is refused 403 Forbidden in the real
  // server's words.
  std::optional<Reply> ComputeQuotaRefusal(const std::string& ns, const json& pod,
                                           const std::string& name) const {
    const std::string prefix = ns + "/";
    const auto& quotas = store_.at("resourcequotas");
    std::optional<std::map<std::string, int64_t>> used;
    const std::map<std::string, int64_t> requested = PodRequests(pod);
    auto format = [](int64_t milli) {
      return milli % 1000 == 0 ? std::to_string(milli / 1000) : absl::StrCat(milli, "m");
    };
    for (auto it = quotas.lower_bound(prefix);
         it != quotas.end() && absl::StartsWith(it->first, prefix); ++it) {
      const json& quota = *it->second;
      const json hard = quota.value("spec", json::object()).value("hard", json::object());
      for (auto limit_field = hard.begin(); limit_field != hard.end(); ++limit_field) {
        const std::string& key = limit_field.key();
        std::string resource;
        if (key == "cpu" || key == "memory") {
          resource = key;
        } else if (absl::StartsWith(key, "requests.")) {
          resource = key.substr(std::string("requests.").size());
        } else {
          continue;
        }
        auto asked = requested.find(resource);
        if (asked == requested.end() || asked->second == 0) continue;
        std::optional<int64_t> limit = QuantityMilli(limit_field.value());
        if (!limit) continue;
        if (!used) {
          used.emplace();
          const auto& pods = store_.at("pods");
          for (auto p = pods.lower_bound(prefix);
               p != pods.end() && absl::StartsWith(p->first, prefix); ++p) {
            if (!PodHoldsResources(*p->second)) continue;
            for (const auto& [r, amount] : PodRequests(*p->second)) (*used)[r] += amount;
          }
        }
        const int64_t in_use = (*used)[resource];
        if (in_use + asked->second <= *limit) continue;
        return Error(403, "Forbidden",
                     absl::StrCat("pods \"", name, "\" is forbidden: exceeded quota: ",
                                  StringAt(quota, "metadata", "name"), ", requested: ", key, "=",
                                  format(asked->second), ", used: ", key, "=", format(in_use),
                                  ", limited: ", key, "=", format(*limit)),
                     {{"name", name}, {"kind", "pods"}});
      }
    }
    return std::nullopt;
  }

  // The Pod Security admission of a pod created in a namespace whose labels
  // enforce a level: 403 Forbidden in the real server's words.
  std::optional<Reply> PodSecurityRefusal(const ResourceInfo& res, const std::string& ns,
                                          const json& pod, const std::string& name) const {
    if (absl::string_view(res.plural) != "pods") return std::nullopt;
    auto labels = namespace_labels_.find(ns);
    if (labels == namespace_labels_.end()) return std::nullopt;
    std::optional<std::string> policy = EnforcedPodSecurityPolicy(labels->second);
    if (!policy) return std::nullopt;
    std::optional<std::string> violation = PodSecurityViolation(*policy, pod);
    if (!violation) return std::nullopt;
    return Error(403, "Forbidden", absl::StrCat("pods \"", name, "\" is forbidden: ", *violation),
                 {{"name", name}, {"kind", "pods"}});
  }

  // 422 Invalid as kube-apiserver words it: `Kind.group "name" is invalid:`
  // then the violation, or the violations in brackets, and one cause each.
  static Reply SchemaRefusal(const ResourceInfo& res, const std::string& name,
                             const api::SchemaCheck& check) {
    const std::string group_version = res.api_version;
    const std::string group = group_version.substr(0, group_version.find('/'));
    std::vector<std::string> messages;
    json causes = json::array();
    for (const api::SchemaViolation& v : check.violations) {
      messages.push_back(v.message);
      causes.push_back({{"reason", v.reason}, {"message", v.detail}, {"field", v.field}});
    }
    std::string joined =
        messages.size() == 1 ? messages[0] : absl::StrCat("[", absl::StrJoin(messages, ", "), "]");
    return Error(422, "Invalid",
                 absl::StrCat(res.kind, ".", group, " \"", name, "\" is invalid: ", joined),
                 {{"name", name}, {"group", group}, {"kind", res.kind}, {"causes", causes}});
  }

  std::optional<Reply> InvalidConfigMap(const ResourceInfo& res, const json& obj,
                                        const std::string& name) const {
    if (absl::string_view(res.plural) != "configmaps") return std::nullopt;
    size_t bytes = 0;
    for (const char* field : {"data", "binaryData"}) {
      auto data = obj.find(field);
      if (data == obj.end() || data->is_null()) continue;
      if (!data->is_object()) {
        return Error(400, "BadRequest",
                     absl::StrCat("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: ",
                                  field, " must be an object of strings"));
      }
      for (auto it = data->begin(); it != data->end(); ++it) {
        if (!it.value().is_string()) {
          return Error(400, "BadRequest",
                       absl::StrCat("ConfigMap in version \"v1\" cannot be handled as a "
                                    "ConfigMap: json: cannot unmarshal ",
                                    it.value().type_name(), " into Go struct field ConfigMap.",
                                    field, " of type string"));
        }
        if (!IsConfigMapKey(it.key())) {
          return Error(422, "Invalid",
                       absl::StrCat("ConfigMap \"", name, "\" is invalid: ", field, "[", it.key(),
                                    "]: Invalid value: \"", it.key(),
                                    "\": a valid config key must consist of alphanumeric "
                                    "characters, '-', '_' or '.'"));
        }
        bytes += it.key().size() + it.value().get_ref<const std::string&>().size();
      }
    }
    if (bytes > kMaxConfigMapBytes) {
      return Error(
          422, "Invalid",
          absl::StrCat("ConfigMap \"", name, "\" is invalid: []: Too long: must have at most ",
                       kMaxConfigMapBytes, " bytes"));
    }
    return std::nullopt;
  }

  Reply CreateLocked(const ResourceInfo& res, const std::string& ns, json obj) {
    if (!obj.is_object()) return Error(400, "BadRequest", "body must be a JSON object");
    if (!obj.contains("metadata") || !obj["metadata"].is_object()) obj["metadata"] = json::object();
    json& md = obj["metadata"];
    std::string name = StringAt(obj, "metadata", "name");
    if (name.empty()) {
      std::string prefix = StringAt(obj, "metadata", "generateName");
      if (prefix.empty()) {
        return Error(422, "Invalid",
                     absl::StrCat(res.kind, " is invalid: metadata.name: Required value"));
      }
      static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
      name = prefix;
      for (int i = 0; i < 5; ++i) name.push_back(kAlphabet[uid_rng_() % (sizeof(kAlphabet) - 1)]);
    }
    std::string body_ns = StringAt(obj, "metadata", "namespace");
    if (!body_ns.empty() && body_ns != ns) {
      return Error(400, "BadRequest",
                   "the namespace of the provided object does not match the namespace sent on "
                   "the request");
    }
    if (std::optional<Reply> refused = Admit(res, ns, &obj, name, Write::kCreate)) return *refused;
    auto& objects = store_.at(StoreKey(res));
    std::string key = Key(ns, name);
    if (objects.count(key)) {
      return Error(409, "AlreadyExists", absl::StrCat(res.plural, " \"", name, "\" already exists"),
                   {{"name", name}, {"kind", res.plural}});
    }
    ++rv_;
    obj["apiVersion"] = res.api_version;
    obj["kind"] = res.kind;
    md["name"] = name;
    if (res.cluster_scoped) {
      md.erase("namespace");
    } else {
      md["namespace"] = ns;
    }
    md["uid"] = NewUid();
    md["creationTimestamp"] = Rfc3339(absl::Now());
    md["generation"] = 1;
    md["resourceVersion"] = std::to_string(rv_);
    if (absl::string_view(res.plural) == "pods" ||
        absl::string_view(res.plural) == "persistentvolumeclaims") {
      // As the real server: a pod waits to be scheduled, a claim to be bound.
      obj["status"] = {{"phase", "Pending"}};
    } else if (res.has_status) {
      obj.erase("status");
    }
    auto stored = std::make_shared<const json>(std::move(obj));
    objects[key] = stored;
    if (&res == FindResource("pods")) pod_created_rv_[key] = rv_;
    Emit(res, "ADDED", stored, nullptr);
    ScheduleLocked(res);
    return Reply{201, *stored};
  }

  // Replaces `slot` with `updated` under the status-subresource rules.
  Reply ReplaceLocked(const ResourceInfo& res, std::shared_ptr<const json>& slot, json updated,
                      bool status) {
    const json& old = *slot;
    std::string body_rv = StringAt(updated, "metadata", "resourceVersion");
    std::string name = StringAt(old, "metadata", "name");
    if (!body_rv.empty() && body_rv != StringAt(old, "metadata", "resourceVersion")) {
      return Error(409, "Conflict",
                   absl::StrCat("Operation cannot be fulfilled on ", res.plural, " \"", name,
                                "\": the object has been modified; please apply your changes "
                                "to the latest version and try again"),
                   {{"name", name}, {"kind", res.plural}});
    }
    json next;
    if (status) {
      if (!res.has_status) return NotFound(res, name + "/status");
      next = old;
      if (updated.contains("status")) {
        next["status"] = updated["status"];
      } else {
        next.erase("status");
      }
    } else {
      next = std::move(updated);
      if (!next.contains("metadata") || !next["metadata"].is_object()) {
        next["metadata"] = json::object();
      }
      if (res.has_status) {
        if (old.contains("status")) {
          next["status"] = old["status"];
        } else {
          next.erase("status");
        }
      }
      // Fields the server owns.
      for (const char* field : {"name", "namespace", "uid", "creationTimestamp", "generation"}) {
        if (old["metadata"].contains(field)) next["metadata"][field] = old["metadata"][field];
      }
      next["apiVersion"] = res.api_version;
      next["kind"] = res.kind;
    }
    if (std::optional<Reply> refused =
            Admit(res, StringAt(old, "metadata", "namespace"), &next, name, Write::kUpdate)) {
      return *refused;
    }
    next["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"];
    if (next == old) return Reply{200, old};  // a no-op write changes nothing, as upstream
    if (!status && next.value("spec", json()) != old.value("spec", json())) {
      next["metadata"]["generation"] = old["metadata"].value("generation", 0) + 1;
    }
    ++rv_;
    next["metadata"]["resourceVersion"] = std::to_string(rv_);
    auto previous = slot;
    slot = std::make_shared<const json>(std::move(next));
    Emit(res, "MODIFIED", slot, previous);
    json written = *slot;  // (scheduling may replace the slot)
    ScheduleLocked(res);
    return Reply{200, std::move(written)};
  }

  // The stand-in for kube-scheduler (Options::schedule_pods; scheduler.h),
  // after a change to pods or nodes: binds what fits, in the order the pods
  // were created, and marks the rest Unschedulable. A bound pod starts at
  // once (phase Running), as if a kubelet were there. Called with mu_ held.
  void ScheduleLocked(const ResourceInfo& changed) {
    if (!options_.schedule_pods || scheduling_) return;
    const ResourceInfo* pods_res = FindResource("pods");
    if (&changed != pods_res && &changed != FindResource("nodes")) return;
    scheduling_ = true;
    std::vector<json> nodes;
    for (const auto& [key, node] : store_.at("nodes")) nodes.push_back(*node);
    auto& pods = store_.at("pods");
    std::vector<std::string> keys;
    for (const auto& [key, pod] : pods) keys.push_back(key);
    std::sort(keys.begin(), keys.end(), [&](const std::string& a, const std::string& b) {
      return pod_created_rv_[a] < pod_created_rv_[b];
    });
    std::vector<json> ordered;
    for (const std::string& key : keys) ordered.push_back(*pods.at(key));
    for (const SchedulingDecision& decision : SchedulePods(nodes, ordered)) {
      json pod = ordered[decision.pod];
      json condition = {{"type", "PodScheduled"},
                        {"lastProbeTime", nullptr},
                        {"lastTransitionTime", Rfc3339(absl::Now())}};
      if (!decision.node.empty()) {
        pod["spec"]["nodeName"] = decision.node;
        condition["status"] = "True";
        pod["status"]["phase"] = "Running";
        pod["status"]["startTime"] = Rfc3339(absl::Now());
        json statuses = json::array();
        for (const json& container : pod["spec"].value("containers", json::array())) {
          statuses.push_back({{"name", container.value("name", "")},
                              {"ready", true},
                              {"restartCount", 0},
                              {"image", container.value("image", "")},
                              {"state", {{"running", {{"startedAt", Rfc3339(absl::Now())}}}}}});
        }
        pod["status"]["containerStatuses"] = std::move(statuses);
      } else {
        condition["status"] = "False";
        condition["reason"] = "Unschedulable";
        condition["message"] = decision.message;
        const json& old = pod["status"].value("conditions", json::array());
        if (old.size() == 1 && old[0].value("reason", "") == "Unschedulable" &&
            old[0].value("message", "") == decision.message) {
          continue;  // as it was
        }
      }
      pod["status"]["conditions"] = json::array({std::move(condition)});
      ++rv_;
      pod["metadata"]["resourceVersion"] = std::to_string(rv_);
      std::shared_ptr<const json>& slot = pods.at(keys[decision.pod]);
      auto previous = slot;
      slot = std::make_shared<const json>(std::move(pod));
      Emit(*pods_res, "MODIFIED", slot, previous);
    }
    scheduling_ = false;
  }

  json DeleteLocked(const ResourceInfo& res, ObjectMap::iterator it, bool orphan) {
    auto& objects = store_.at(StoreKey(res));
    json deleted = *it->second;
    pod_created_rv_.erase(it->first);
    objects.erase(it);
    if (&res == FindResource("pods")) logs_.Forget(StringAt(deleted, "metadata", "uid"));
    ++rv_;
    deleted["metadata"]["resourceVersion"] = std::to_string(rv_);
    Emit(res, "DELETED", std::make_shared<const json>(deleted), nullptr);
    ScheduleLocked(res);
    if (orphan) return deleted;
    std::string uid = StringAt(deleted, "metadata", "uid");
    std::string ns = StringAt(deleted, "metadata", "namespace");
    for (const ResourceInfo& dep_res : kResources) {
      auto& deps = store_.at(StoreKey(dep_res));
      std::vector<std::string> doomed;
      for (const auto& [key, obj] : deps) {
        if (StringAt(*obj, "metadata", "namespace") != ns) continue;
        const json& md = (*obj)["metadata"];
        if (!md.contains("ownerReferences") || !md["ownerReferences"].is_array()) continue;
        for (const json& ref : md["ownerReferences"]) {
          if (ref.is_object() && ref.value("uid", "") == uid) {
            doomed.push_back(key);
            break;
          }
        }
      }
      for (const std::string& key : doomed) {
        auto dep = deps.find(key);
        if (dep != deps.end()) DeleteLocked(dep_res, dep, false);
      }
    }
    return deleted;
  }

  // ---- HTTP ----
  void AcceptLoop() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // listening socket shut down
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::lock_guard<std::mutex> lock(conn_mu_);
      {
        std::lock_guard<std::mutex> state_lock(mu_);
        if (stopping_) {
          ::close(fd);
          return;
        }
      }
      // Reap finished connections so a long test does not accumulate threads.
      for (auto c = connections_.begin(); c != connections_.end();) {
        if ((*c)->done) {
          (*c)->thread.join();
          ::close((*c)->fd);
          c = connections_.erase(c);
        } else {
          ++c;
        }
      }
      auto conn = std::make_unique<Connection>();
      conn->fd = fd;
      Connection* raw = conn.get();
      conn->thread = std::thread([this, raw] {
        Serve(raw->fd);
        ::shutdown(raw->fd, SHUT_RDWR);
        raw->done = true;
      });
      connections_.push_back(std::move(conn));
    }
  }

  void Serve(int fd) {
    RequestReader reader(fd);
    for (;;) {
      std::optional<HttpRequest> req = reader.Next();
      if (!req) return;
      if (!Handle(fd, *req)) return;
      if (absl::EqualsIgnoreCase(req->headers["connection"], "close")) return;
    }
  }

  static bool SendReply(int fd, const Reply& reply) {
    std::string body = reply.body.dump();
    std::string head = absl::StrCat(
        "HTTP/1.1 ", reply.code, " ", ReasonPhrase(reply.code),
        "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(), "\r\n\r\n");
    return SendAll(fd, head) && SendAll(fd, body);
  }

  void CountRefusal(const std::string& verb, absl::string_view plural, int code) {
    std::lock_guard<std::mutex> lock(mu_);
    ++refusal_counts_[absl::StrCat(verb, " ", plural, " ", code)];
  }

  void Count(const std::string& verb, absl::string_view plural, absl::string_view sub) {
    std::lock_guard<std::mutex> lock(mu_);
    ++request_counts_[absl::StrCat(verb, " ", plural, sub.empty() ? "" : "/", sub)];
  }

  // A place among the requests served at once (Options::max_in_flight),
  // held while the request is served.
  class InFlight {
   public:
    InFlight(Impl& impl, bool hold) : impl_(impl), held_(hold) {
      if (!held_) return;
      std::unique_lock<std::mutex> lock(impl_.in_flight_mu_);
      const int limit = impl_.options_.max_in_flight;
      impl_.in_flight_cv_.wait(lock, [&] { return limit <= 0 || impl_.in_flight_ < limit; });
      ++impl_.in_flight_;
      impl_.peak_in_flight_ = std::max(impl_.peak_in_flight_, impl_.in_flight_);
    }
    ~InFlight() {
      if (!held_) return;
      {
        std::lock_guard<std::mutex> lock(impl_.in_flight_mu_);
        --impl_.in_flight_;
      }
      impl_.in_flight_cv_.notify_one();
    }

   private:
    Impl& impl_;
    const bool held_;
  };

  // Returns false when the connection must be closed.
  bool Handle(int fd, HttpRequest& req) {
    const bool long_running =
        req.method == "GET" && (req.query.count("watch") > 0 || req.query.count("follow") > 0);
    const bool write = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                       req.method == "DELETE";
    InFlight place(*this, !long_running);
    absl::Duration latency;
    int fail_code = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      latency = latency_ + (write ? options_.write_latency : absl::ZeroDuration());
      if (fail_next_ > 0) {
        --fail_next_;
        fail_code = fail_code_;
      }
    }
    if (latency > absl::ZeroDuration()) absl::SleepFor(latency);
    if (!options_.bearer_token.empty() &&
        req.headers["authorization"] != absl::StrCat("Bearer ", options_.bearer_token)) {
      return SendReply(fd, Error(401, "Unauthorized", "Unauthorized"));
    }
    if (fail_code != 0) {
      return SendReply(fd, Error(fail_code, fail_code == 429 ? "TooManyRequests" : "InternalError",
                                 "injected failure"));
    }

    if (req.method == "GET") {
      if (std::optional<json> document = Discovery(req.path)) {
        Count("get", "discovery", "");
        return SendReply(fd, Reply{200, *std::move(document)});
      }
    }

    // Route: /api/v1/... or /apis/GROUP/VERSION/...
    std::vector<std::string> parts;
    for (absl::string_view p : absl::StrSplit(req.path, '/', absl::SkipEmpty())) {
      parts.push_back(PercentDecode(p, false));
    }
    std::string api_version;
    size_t i = 0;
    if (parts.size() >= 2 && parts[0] == "api") {
      api_version = parts[1];
      i = 2;
    } else if (parts.size() >= 3 && parts[0] == "apis") {
      api_version = absl::StrCat(parts[1], "/", parts[2]);
      i = 3;
    } else {
      return SendReply(fd, Error(404, "NotFound", absl::StrCat("no route for ", req.path)));
    }
    std::string ns;
    if (parts.size() > i + 1 && parts[i] == "namespaces") {
      ns = parts[i + 1];
      i += 2;
    }
    if (parts.size() <= i) {
      return SendReply(fd, Error(404, "NotFound", absl::StrCat("no route for ", req.path)));
    }
    const ResourceInfo* res = FindRoute(api_version, parts[i]);
    if (res == nullptr || (res->pod_group && !options_.pod_group_crds)) {
      return SendReply(
          fd, Error(404, "NotFound",
                    absl::StrCat("the server could not find the requested resource ", req.path)));
    }
    if (res->cluster_scoped && !ns.empty()) {
      return SendReply(fd, Error(404, "NotFound", absl::StrCat("no route for ", req.path)));
    }
    std::string name = parts.size() > i + 1 ? parts[i + 1] : "";
    std::string sub = parts.size() > i + 2 ? parts[i + 2] : "";
    const bool pod_log = sub == "log" && absl::string_view(res->plural) == "pods";
    if (parts.size() > i + 3 || (!sub.empty() && sub != "status" && !pod_log)) {
      return SendReply(fd, Error(404, "NotFound", absl::StrCat("no route for ", req.path)));
    }
    if (pod_log) {
      if (req.method != "GET") {
        return SendReply(fd, Error(405, "MethodNotAllowed",
                                   absl::StrCat(req.method, " is not supported on ", req.path)));
      }
      Count("get", res->plural, sub);
      return ServeLog(fd, ns, name, req);
    }
    bool status = sub == "status";

    if (req.method == "GET" && name.empty()) {
      Filter filter;
      filter.ns = ns;
      auto selector = LabelSelector::Parse(req.query["labelSelector"]);
      if (!selector.ok()) {
        return SendReply(fd, Error(400, "BadRequest", std::string(selector.status().message())));
      }
      filter.labels = *std::move(selector);
      filter.plural = res->plural;
      for (absl::string_view term :
           absl::StrSplit(req.query["fieldSelector"], ',', absl::SkipEmpty())) {
        std::pair<std::string, std::string> kv = absl::StrSplit(term, absl::MaxSplits('=', 1));
        Filter::FieldTerm field;
        if (absl::EndsWith(kv.first, "!")) {  // "!="
          kv.first.pop_back();
          field.negated = true;
        } else if (absl::EndsWith(kv.first, "=")) {
          kv.first.pop_back();  // "=="
        }
        if (!kv.second.empty() && kv.second[0] == '=') kv.second.erase(0, 1);
        if (!FieldLabel(res->plural, json::object(), kv.first).has_value()) {
          return SendReply(
              fd, Error(400, "BadRequest", absl::StrCat("field label not supported: ", kv.first)));
        }
        field.label = kv.first;
        field.value = kv.second;
        filter.fields.push_back(std::move(field));
      }
      std::string watch = req.query["watch"];
      if (watch == "true" || watch == "1") {
        Count("watch", res->plural, "");
        ServeWatch(fd, *res, filter, req);
        return false;
      }
      Count("list", res->plural, "");
      size_t limit = 0;
      if (!req.query["limit"].empty() && !absl::SimpleAtoi(req.query["limit"], &limit)) {
        return SendReply(fd, Error(400, "BadRequest", "limit must be an integer"));
      }
      return SendReply(fd,
                       AsRequested(*res, req, List(*res, filter, limit, req.query["continue"])));
    }
    if ((ns.empty() && !res->cluster_scoped) || (name.empty() && req.method != "POST")) {
      return SendReply(fd, Error(405, "MethodNotAllowed",
                                 absl::StrCat(req.method, " is not supported on ", req.path)));
    }
    json body;
    if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
      body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
      if (body.is_discarded()) {
        return SendReply(fd, Error(400, "BadRequest", "request body is not valid JSON"));
      }
    }
    if (req.method == "GET") {
      Count("get", res->plural, sub);
      return SendReply(fd, AsRequested(*res, req, Get(*res, ns, name)));
    }
    if (req.method == "POST" && name.empty()) {
      Count("create", res->plural, "");
      Reply created = Create(*res, ns, std::move(body));
      if (created.code >= 400) CountRefusal("create", res->plural, created.code);
      return SendReply(fd, created);
    }
    if (req.method == "PUT") {
      Count("update", res->plural, sub);
      return SendReply(fd, Update(*res, ns, name, std::move(body), status));
    }
    if (req.method == "PATCH") {
      Count("patch", res->plural, sub);
      if (!absl::StartsWith(req.headers["content-type"], "application/merge-patch+json")) {
        return SendReply(fd, Error(415, "UnsupportedMediaType",
                                   absl::StrCat("the body of the request was in an unsupported "
                                                "format: ",
                                                req.headers["content-type"],
                                                " (only application/merge-patch+json)")));
      }
      return SendReply(fd, MergePatch(*res, ns, name, body, status));
    }
    if (req.method == "DELETE" && sub.empty()) {
      Count("delete", res->plural, "");
      bool orphan = req.query["propagationPolicy"] == "Orphan";
      if (!req.body.empty()) {
        json opts = json::parse(req.body, nullptr, false);
        if (opts.is_object() && opts.value("propagationPolicy", "") == "Orphan") orphan = true;
      }
      return SendReply(fd, Delete(*res, ns, name, orphan));
    }
    return SendReply(fd, Error(405, "MethodNotAllowed",
                               absl::StrCat(req.method, " is not supported on ", req.path)));
  }

  // A successful get or list in the media type the client asked for: a Table
  // when it asks for one and the resource has printer columns (ServeCrd);
  // plain JSON when it takes that; else 406, as the real server answers a
  // type it cannot produce.
  Reply AsRequested(const ResourceInfo& res, HttpRequest& req, Reply reply) const {
    const std::string& accept = req.headers["accept"];
    if (reply.code != 200 || accept.empty() || !AcceptsTable(accept)) return reply;
    json columns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = served_crds_.find(res.plural);
      if (it != served_crds_.end()) columns = it->second.printer_columns;
    }
    if (columns.is_null()) {
      if (AcceptsPlainJson(accept)) return reply;
      return Error(406, "NotAcceptable",
                   absl::StrCat("the fake API server prints only resources given printer columns "
                                "as a Table, not ",
                                res.plural));
    }
    const bool list = reply.body.contains("items");
    std::vector<json> objects;
    if (list) {
      for (const json& item : reply.body["items"]) objects.push_back(item);
    } else {
      objects.push_back(reply.body);
    }
    const std::string rv = list ? reply.body["metadata"].value("resourceVersion", "")
                                : StringAt(reply.body, "metadata", "resourceVersion");
    std::string include = req.query["includeObject"];
    absl::StatusOr<json> table =
        ToTable(objects, columns, rv, include.empty() ? "Metadata" : include, absl::Now());
    if (!table.ok()) return Error(400, "BadRequest", std::string(table.status().message()));
    if (list && reply.body["metadata"].contains("continue")) {
      (*table)["metadata"]["continue"] = reply.body["metadata"]["continue"];
    }
    return Reply{200, *std::move(table)};
  }

 public:
  absl::Status ServeCrd(const json& crd) {
    const std::string plural = crd.value("/spec/names/plural"_json_pointer, std::string());
    const ResourceInfo* res = FindResource(plural);
    if (res == nullptr ||
        crd.value("/spec/group"_json_pointer, std::string()) + "/v1" != res->api_version) {
      return absl::InvalidArgumentError(
          absl::StrCat("the fake API server does not store ", plural, " of this group"));
    }
    for (const json& version : crd.value("/spec/versions"_json_pointer, json::array())) {
      if (version.value("name", "") != "v1") continue;
      const json columns = version.value("additionalPrinterColumns", json::array());
      for (const json& c : columns) {
        absl::StatusOr<const json*> valid =
            SelectSimpleJsonPath(json::object(), c.value("jsonPath", ""));
        if (!valid.ok()) return valid.status();
      }
      const json schema = version.value("/schema/openAPIV3Schema"_json_pointer, json());
      std::lock_guard<std::mutex> lock(mu_);
      served_crds_[plural] = ServedCrd{crd, columns, schema};
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("the CRD of ", plural, " has no version v1"));
  }

 private:
  // Discovery and OpenAPI documents (discovery.h), or nullopt for another path.
  std::optional<json> Discovery(const std::string& path) const {
    static const std::map<std::string, std::vector<std::string>> kShortNames = {
        {"pods", {"po"}}, {"services", {"svc"}}, {"events", {"ev"}}, {"configmaps", {"cm"}}};
    std::vector<DiscoveredResource> resources;
    std::vector<json> crds;
    std::lock_guard<std::mutex> lock(mu_);
    for (const ResourceInfo& r : kResources) {
      if (r.pod_group && !options_.pod_group_crds) continue;
      DiscoveredResource d;
      d.plural = r.plural;
      d.singular = absl::AsciiStrToLower(r.kind);
      d.kind = r.kind;
      d.group_version = r.api_version;
      d.has_status = r.has_status;
      d.namespaced = !r.cluster_scoped;
      if (auto it = kShortNames.find(r.plural); it != kShortNames.end()) d.short_names = it->second;
      if (auto it = served_crds_.find(r.plural); it != served_crds_.end()) {
        const json& names = it->second.crd["spec"]["names"];
        d.short_names = names.value("shortNames", std::vector<std::string>{});
        d.categories = names.value("categories", std::vector<std::string>{});
        crds.push_back(it->second.crd);
      }
      resources.push_back(std::move(d));
    }
    return DiscoveryDocument(path, resources, crds, absl::StrCat("127.0.0.1:", port_));
  }

  // GET pods/NAME/log (pod_logs.h). Returns false when the connection must
  // be closed (after a streamed answer).
  bool ServeLog(int fd, const std::string& ns, const std::string& name, const HttpRequest& req) {
    FakeApiServer::LogRequestHook hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = before_log_request_;
    }
    if (hook) hook(name, req.query);  // unlocked: it may call back into the server
    Reply pod = Get(*FindResource("pods"), ns, name);
    if (pod.code != 200) return SendReply(fd, pod);
    std::optional<PodLogs::Error> error = logs_.Serve(
        pod.body, req.query,
        [fd] {
          return SendAll(fd,
                         "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: "
                         "chunked\r\nConnection: close\r\n\r\n");
        },
        [fd](const std::string& line) {
          return SendAll(fd, absl::StrCat(absl::Hex(line.size()), "\r\n", line, "\r\n"));
        });
    if (error) return SendReply(fd, Error(error->code, error->reason, error->message));
    SendAll(fd, "0\r\n\r\n");
    return false;
  }

  // Streams watch events until the client goes away, the server stops, the
  // watch is dropped or timeoutSeconds pass. Always closes the connection.
  void ServeWatch(int fd, const ResourceInfo& res, const Filter& filter, HttpRequest& req) {
    const bool bookmarks = req.query["allowWatchBookmarks"] == "true";
    const std::string rv_text = req.query["resourceVersion"];
    int timeout_seconds = 0;
    if (!req.query["timeoutSeconds"].empty()) {
      (void)absl::SimpleAtoi(req.query["timeoutSeconds"], &timeout_seconds);
    }
    int64_t from = 0;
    if (!rv_text.empty() && rv_text != "0" && !absl::SimpleAtoi(rv_text, &from)) {
      SendReply(fd, Error(400, "BadRequest", absl::StrCat("invalid resourceVersion ", rv_text)));
      return;
    }
    auto chunk_text = [fd](std::string line) {
      line.push_back('\n');
      return SendAll(fd, absl::StrCat(absl::Hex(line.size()), "\r\n", line, "\r\n"));
    };
    auto chunk = [&](const json& event) { return chunk_text(event.dump()); };
    auto expired = [&](int64_t rv, int64_t compacted) {
      return json{{"type", "ERROR"},
                  {"object", StatusBody(410, "Expired",
                                        absl::StrCat("too old resource version: ", rv, " (",
                                                     compacted, ")"))}};
    };
    std::vector<json> initial;
    int64_t position;
    uint64_t drop_generation, compact_generation;
    bool too_old = false;
    int64_t compacted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop_generation = drop_generation_;
      compact_generation = compact_generation_;
      compacted = compacted_rv_;
      if (from == 0) {
        for (const auto& [key, obj] : store_.at(StoreKey(res))) {
          if (filter.Matches(*obj)) initial.push_back({{"type", "ADDED"}, {"object", *obj}});
        }
        position = rv_;
      } else if (from < compacted_rv_) {
        too_old = true;
        position = from;
      } else {
        position = from;
      }
      ++open_watches_;
    }
    struct Closer {
      Impl* self;
      ~Closer() {
        std::lock_guard<std::mutex> lock(self->mu_);
        --self->open_watches_;
      }
    } closer{this};
    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n";
    if (!SendAll(fd, head)) return;
    if (too_old) {
      chunk(expired(from, compacted));
      SendAll(fd, "0\r\n\r\n");
      return;
    }
    for (const json& e : initial) {
      if (!chunk(e)) return;
    }
    initial.clear();
    const auto start = std::chrono::steady_clock::now();
    const auto bookmark_every = absl::ToChronoNanoseconds(options_.bookmark_interval);
    auto next_bookmark = start + bookmark_every;
    const auto deadline = timeout_seconds > 0 ? start + std::chrono::seconds(timeout_seconds)
                                              : std::chrono::steady_clock::time_point::max();
    // An event to send: a stored object (serialised after the lock is
    // released, never copied) or one made here (ERROR, BOOKMARK).
    struct Outgoing {
      std::string type;
      std::shared_ptr<const json> object;
      json made;
    };
    for (;;) {
      std::vector<Outgoing> out;
      bool end = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        auto wake = bookmarks ? std::min(next_bookmark, deadline) : deadline;
        auto ready = [&] {
          return stopping_ || drop_generation_ != drop_generation ||
                 compact_generation_ != compact_generation || last_change_.at(&res) > position;
        };
        std::condition_variable& changed = resource_cv_.at(&res);
        if (wake == std::chrono::steady_clock::time_point::max()) {
          changed.wait(lock, ready);
        } else {
          changed.wait_until(lock, wake, ready);
        }
        if (stopping_ || drop_generation_ != drop_generation) {
          end = true;
        } else if (compact_generation_ != compact_generation || position < compacted_rv_) {
          out.push_back({.made = expired(position, compacted_rv_)});
          end = true;
        } else {
          auto it = std::upper_bound(history_.begin(), history_.end(), position,
                                     [](int64_t rv, const WatchEvent& e) { return rv < e.rv; });
          for (; it != history_.end(); ++it) {
            position = it->rv;
            if (it->resource != &res) continue;
            bool now = filter.Matches(*it->object);
            bool before = it->previous != nullptr && filter.Matches(*it->previous);
            std::string type = it->type;
            if (type == "MODIFIED" && now && !before) type = "ADDED";
            if (type == "MODIFIED" && !now && before) {
              type = "DELETED";
              now = true;
            }
            if (!now) continue;
            out.push_back({.type = std::move(type), .object = it->object});
          }
          position = std::max(position, rv_);
          if (out.empty() && bookmarks && std::chrono::steady_clock::now() >= next_bookmark) {
            out.push_back(
                {.made = {{"type", "BOOKMARK"},
                          {"object",
                           {{"kind", res.kind},
                            {"apiVersion", res.api_version},
                            {"metadata", {{"resourceVersion", std::to_string(position)}}}}}}});
          }
        }
      }
      for (const Outgoing& e : out) {
        const bool sent = e.object != nullptr
                              ? chunk_text(absl::StrCat("{\"type\":\"", e.type,
                                                        "\",\"object\":", e.object->dump(), "}"))
                              : chunk(e.made);
        if (!sent) return;
      }
      if (!out.empty() && bookmarks)
        next_bookmark = std::chrono::steady_clock::now() + bookmark_every;
      if (end || std::chrono::steady_clock::now() >= deadline) break;
    }
    SendAll(fd, "0\r\n\r\n");
  }

  const Options options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread accept_thread_;

  std::mutex conn_mu_;
  std::list<std::unique_ptr<Connection>> connections_;  // guarded by conn_mu_

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable watch_cv_;
  // Per resource: the resourceVersion of its last change, and what its
  // watches wait on (Emit).
  std::map<const ResourceInfo*, int64_t> last_change_;
  std::map<const ResourceInfo*, std::condition_variable> resource_cv_;
  bool stopping_ = false;
  int64_t rv_ = 1000;
  // When each pod was created (its first resourceVersion): the scheduler's order.
  std::map<std::string, int64_t> pod_created_rv_;
  bool scheduling_ = false;  // ScheduleLocked is writing
  int64_t compacted_rv_ = 0;
  std::deque<WatchEvent> history_;
  std::map<std::string, ObjectMap> store_ = [] {
    std::map<std::string, ObjectMap> m;
    for (const ResourceInfo& r : kResources) m[StoreKey(r)];
    return m;
  }();
  std::mt19937_64 uid_rng_{std::random_device{}()};
  uint64_t drop_generation_ = 0;
  uint64_t compact_generation_ = 0;
  int fail_next_ = 0;
  int fail_code_ = 500;
  absl::Duration latency_ = absl::ZeroDuration();
  // Requests being served now, and their limit's wait (InFlight).
  std::mutex in_flight_mu_;
  std::condition_variable in_flight_cv_;
  int in_flight_ = 0;
  int peak_in_flight_ = 0;
  FakeApiServer::LogRequestHook before_log_request_;
  int open_watches_ = 0;
  std::map<std::string, int64_t> request_counts_;
  std::map<std::string, int64_t> refusal_counts_;
  struct ServedCrd {
    json crd;
    json printer_columns;  // version v1's
    json schema;           // version v1's openAPIV3Schema; null: none to check
  };
  std::map<std::string, ServedCrd> served_crds_;  // by plural, from ServeCrd
  // Namespaces are not objects here: their labels, from LabelNamespace.
  std::map<std::string, std::map<std::string, std::string>> namespace_labels_;

 public:
  PodLogs logs_;  // its own lock; may be called with mu_ held
};

namespace {

absl::Status ToStatus(const Reply& reply) {
  if (reply.code < 400) return absl::OkStatus();
  std::string message = reply.body.value("message", "");
  switch (reply.code) {
    case 404:
      return absl::NotFoundError(message);
    case 409:
      return reply.body.value("reason", "") == "AlreadyExists" ? absl::AlreadyExistsError(message)
                                                               : absl::AbortedError(message);
    case 400:
    case 422:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnknownError(message);
  }
}

absl::StatusOr<const ResourceInfo*> Resolve(absl::string_view plural) {
  const ResourceInfo* res = FindResource(plural);
  if (res == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown resource ", plural));
  return res;
}

}  // namespace

FakeApiServer::FakeApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeApiServer::~FakeApiServer() = default;

absl::StatusOr<std::unique_ptr<FakeApiServer>> FakeApiServer::Start(Options options) {
  auto impl = std::make_unique<Impl>(options);
  if (options.serve_training_job_crd) {
    absl::Status served = impl->ServeCrd(api::TrainingJobCrd());
    if (!served.ok()) return served;
  }
  absl::Status s = impl->Listen();
  if (!s.ok()) return s;
  std::unique_ptr<FakeApiServer> server(new FakeApiServer(std::move(impl)));
  for (int i = 0; i < options.default_nodes; ++i) {
    const nlohmann::json node = {
        {"metadata", {{"name", absl::StrCat("node-", i)}}},
        {"status",
         {{"allocatable",
           {{"cpu", "1000"}, {"memory", "4Ti"}, {"pods", "10000"}, {"nvidia.com/gpu", "64"}}}}}};
    absl::StatusOr<nlohmann::json> made = server->Create("nodes", "", node);
    if (!made.ok()) return made.status();
  }
  return server;
}

int FakeApiServer::port() const { return impl_->port(); }
std::string FakeApiServer::url() const { return absl::StrCat("http://127.0.0.1:", port()); }
void FakeApiServer::DropWatches() { impl_->DropWatches(); }
void FakeApiServer::FailNextRequests(int n, int code) { impl_->FailNextRequests(n, code); }
void FakeApiServer::SetLatency(absl::Duration latency) { impl_->SetLatency(latency); }
void FakeApiServer::LabelNamespace(absl::string_view ns,
                                   std::map<std::string, std::string> labels) {
  impl_->LabelNamespace(std::string(ns), std::move(labels));
}
void FakeApiServer::BeforeLogRequests(LogRequestHook hook) {
  impl_->BeforeLogRequests(std::move(hook));
}
void FakeApiServer::CompactHistory() { impl_->CompactHistory(); }
absl::Status FakeApiServer::ServeCrd(const nlohmann::json& crd) { return impl_->ServeCrd(crd); }
std::map<std::string, int64_t> FakeApiServer::RefusalCounts() const {
  return impl_->RefusalCounts();
}
std::map<std::string, int64_t> FakeApiServer::RequestCounts() const {
  return impl_->RequestCounts();
}
void FakeApiServer::ResetRequestCounts() { impl_->ResetRequestCounts(); }
int FakeApiServer::OpenWatchCount() const { return impl_->OpenWatchCount(); }
int FakeApiServer::PeakInFlight() const { return impl_->PeakInFlight(); }
int64_t FakeApiServer::CurrentResourceVersion() const { return impl_->CurrentResourceVersion(); }

absl::StatusOr<nlohmann::json> FakeApiServer::Create(absl::string_view resource,
                                                     absl::string_view ns, nlohmann::json object) {
  auto res = Resolve(resource);
  if (!res.ok()) return res.status();
  Reply r = impl_->Create(**res, std::string(ns), std::move(object));
  if (r.code >= 400) return ToStatus(r);
  return r.body;
}

absl::StatusOr<nlohmann::json> FakeApiServer::Get(absl::string_view resource, absl::string_view ns,
                                                  absl::string_view name) const {
  auto res = Resolve(resource);
  if (!res.ok()) return res.status();
  Reply r = impl_->Get(**res, std::string(ns), std::string(name));
  if (r.code >= 400) return ToStatus(r);
  return r.body;
}

absl::StatusOr<nlohmann::json> FakeApiServer::MergePatch(absl::string_view resource,
                                                         absl::string_view ns,
                                                         absl::string_view name,
                                                         const nlohmann::json& patch,
                                                         absl::string_view subresource) {
  auto res = Resolve(resource);
  if (!res.ok()) return res.status();
  Reply r =
      impl_->MergePatch(**res, std::string(ns), std::string(name), patch, subresource == "status");
  if (r.code >= 400) return ToStatus(r);
  return r.body;
}

absl::Status FakeApiServer::Delete(absl::string_view resource, absl::string_view ns,
                                   absl::string_view name) {
  auto res = Resolve(resource);
  if (!res.ok()) return res.status();
  return ToStatus(impl_->Delete(**res, std::string(ns), std::string(name), false));
}

std::vector<nlohmann::json> FakeApiServer::List(absl::string_view resource,
                                                absl::string_view ns) const {
  const ResourceInfo* res = FindResource(resource);
  if (res == nullptr) return {};
  return impl_->ListAll(*res, std::string(ns));
}

absl::StatusOr<std::string> FakeApiServer::PodUid(absl::string_view ns,
                                                  absl::string_view pod) const {
  absl::StatusOr<nlohmann::json> object = Get("pods", ns, pod);
  if (!object.ok()) return object.status();
  return (*object)["metadata"].value("uid", "");
}

absl::Status FakeApiServer::StartContainer(absl::string_view ns, absl::string_view pod,
                                           absl::string_view container) {
  absl::StatusOr<std::string> uid = PodUid(ns, pod);
  if (!uid.ok()) return uid.status();
  return impl_->logs_.StartContainer(*uid, std::string(container));
}

absl::Status FakeApiServer::AppendLog(absl::string_view ns, absl::string_view pod,
                                      absl::string_view container, absl::string_view text) {
  absl::StatusOr<std::string> uid = PodUid(ns, pod);
  if (!uid.ok()) return uid.status();
  return impl_->logs_.AppendLog(*uid, std::string(container), text);
}

absl::Status FakeApiServer::StopContainer(absl::string_view ns, absl::string_view pod,
                                          absl::string_view container) {
  absl::StatusOr<std::string> uid = PodUid(ns, pod);
  if (!uid.ok()) return uid.status();
  return impl_->logs_.StopContainer(*uid, std::string(container));
}

void FakeApiServer::DropLogStreams() { impl_->logs_.DropStreams(); }

bool FakeApiServer::WaitUntil(const std::function<bool()>& predicate, absl::Duration timeout) {
  return impl_->WaitUntil(predicate, timeout);
}

size_t FakeApiServer::Count(absl::string_view resource) const {
  const ResourceInfo* res = FindResource(resource);
  return res == nullptr ? 0 : impl_->Count(*res);
}

std::string WriteKubeconfig(const std::string& dir, const std::string& server_url,
                            const std::string& token) {
  const std::string path = dir + "/kubeconfig";
  std::ofstream out(path);
  out << "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
      << "clusters:\n- name: fake\n  cluster:\n    server: " << server_url << "\n"
      << "contexts:\n- name: fake\n  context: {cluster: fake, user: op, namespace: ns1}\n"
      << "users:\n- name: op\n  user:\n    token: " << token << "\n";
  return path;
}

}  // namespace kubetrain::fake_apiserver
