#include "tests/fake_apiserver/pod_logs.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;

std::string StringAt(const json& object, const char* a, const char* b) {
  if (!object.is_object() || !object.contains(a) || !object[a].is_object()) return "";
  const json& inner = object[a];
  return inner.contains(b) && inner[b].is_string() ? inner[b].get<std::string>() : "";
}

std::vector<std::string> ContainerNames(const json& pod, const char* list) {
  std::vector<std::string> names;
  if (!pod.contains("spec") || !pod["spec"].is_object()) return names;
  const json& spec = pod["spec"];
  if (!spec.contains(list) || !spec[list].is_array()) return names;
  for (const json& c : spec[list]) {
    if (c.is_object() && c.contains("name") && c["name"].is_string()) names.push_back(c["name"]);
  }
  return names;
}

// The waiting reason the pod's status gives `container`, "" when none.
std::string WaitingReason(const json& pod, const std::string& container) {
  if (!pod.contains("status") || !pod["status"].is_object()) return "";
  for (const char* list : {"containerStatuses", "initContainerStatuses"}) {
    const json& status = pod["status"];
    if (!status.contains(list) || !status[list].is_array()) continue;
    for (const json& s : status[list]) {
      if (!s.is_object() || s.value("name", json()) != container) continue;
      if (s.contains("state") && s["state"].is_object() && s["state"].contains("waiting") &&
          s["state"]["waiting"].is_object()) {
        return s["state"]["waiting"].value("reason", "");
      }
    }
  }
  return "";
}

// Kubernetes reads query booleans with strconv.ParseBool.
std::optional<bool> ParseBool(const std::map<std::string, std::string>& query,
                              const std::string& name) {
  auto it = query.find(name);
  if (it == query.end() || it->second.empty()) return false;
  for (const char* yes : {"1", "t", "T", "TRUE", "true", "True"}) {
    if (it->second == yes) return true;
  }
  for (const char* no : {"0", "f", "F", "FALSE", "false", "False"}) {
    if (it->second == no) return false;
  }
  return std::nullopt;
}

PodLogs::Error BadRequest(std::string message) {
  return PodLogs::Error{400, "BadRequest", std::move(message)};
}

}  // namespace

absl::Time PodLogs::NextStamp() {
  absl::Time now = absl::Now();
  if (now <= last_stamp_) now = last_stamp_ + absl::Nanoseconds(1);
  last_stamp_ = now;
  return now;
}

absl::StatusOr<PodLogs::Container*> PodLogs::Find(const std::string& uid,
                                                  const std::string& container) {
  auto pod = pods_.find(uid);
  if (pod == pods_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("container ", container, " never started"));
  }
  auto it = pod->second.find(container);
  if (it == pod->second.end() || it->second.runs.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("container ", container, " never started"));
  }
  return &it->second;
}

absl::Status PodLogs::StartContainer(const std::string& uid, const std::string& container) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Container& c = pods_[uid][container];
    if (!c.runs.empty()) c.runs.back().ended = true;
    c.runs.emplace_back();
    ++c.starts;
    while (c.runs.size() > 2) c.runs.pop_front();
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status PodLogs::AppendLog(const std::string& uid, const std::string& container,
                                absl::string_view text) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<Container*> c = Find(uid, container);
    if (!c.ok()) return c.status();
    Run& run = (*c)->runs.back();
    if (run.ended) {
      return absl::FailedPreconditionError(
          absl::StrCat("container ", container, " has stopped: start it again first"));
    }
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      run.lines.push_back({NextStamp(), std::string(line)});
    }
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status PodLogs::StopContainer(const std::string& uid, const std::string& container) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<Container*> c = Find(uid, container);
    if (!c.ok()) return c.status();
    (*c)->runs.back().ended = true;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

void PodLogs::Forget(const std::string& uid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pods_.erase(uid);
  }
  changed_.notify_all();
}

void PodLogs::DropStreams() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++drop_generation_;
  }
  changed_.notify_all();
}

void PodLogs::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
}

std::optional<PodLogs::Error> PodLogs::Serve(const json& pod,
                                             const std::map<std::string, std::string>& query,
                                             const std::function<bool()>& start,
                                             const std::function<bool(const std::string&)>& write) {
  const std::string pod_name = StringAt(pod, "metadata", "name");
  const std::string uid = StringAt(pod, "metadata", "uid");
  for (const char* unsupported : {"tailLines", "limitBytes", "insecureSkipTLSVerifyBackend"}) {
    if (query.count(unsupported) > 0) {
      return BadRequest(absl::StrCat(unsupported, " is not implemented by the fake API server"));
    }
  }
  std::optional<bool> follow = ParseBool(query, "follow");
  std::optional<bool> previous = ParseBool(query, "previous");
  std::optional<bool> timestamps = ParseBool(query, "timestamps");
  if (!follow || !previous || !timestamps) {
    return BadRequest("follow, previous and timestamps take true or false");
  }
  auto since_time = query.find("sinceTime");
  auto since_seconds = query.find("sinceSeconds");
  if (since_time != query.end() && since_seconds != query.end()) {
    return BadRequest("at most one of `sinceTime` or `sinceSeconds` may be specified");
  }
  absl::Time since = absl::InfinitePast();
  if (since_time != query.end()) {
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, since_time->second, &since, &error)) {
      return BadRequest(absl::StrCat("sinceTime \"", since_time->second, "\": ", error));
    }
  }
  if (since_seconds != query.end()) {
    int64_t seconds = 0;
    if (!absl::SimpleAtoi(since_seconds->second, &seconds) || seconds < 1) {
      return BadRequest("sinceSeconds: must be greater than 0");
    }
    since = absl::Now() - absl::Seconds(seconds);
  }

  const std::vector<std::string> containers = ContainerNames(pod, "containers");
  const std::vector<std::string> init = ContainerNames(pod, "initContainers");
  std::string container = query.count("container") > 0 ? query.at("container") : "";
  if (container.empty()) {
    if (containers.size() != 1) {
      return BadRequest(absl::StrCat("a container name must be specified for pod ", pod_name,
                                     ", choose one of: [", absl::StrJoin(containers, " "), "]"));
    }
    container = containers[0];
  } else if (std::find(containers.begin(), containers.end(), container) == containers.end() &&
             std::find(init.begin(), init.end(), container) == init.end()) {
    return BadRequest(absl::StrCat("container ", container, " is not valid for pod ", pod_name));
  }

  // Which run: its number among every start of the container.
  uint64_t run_number;
  uint64_t drop_generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<Container*> c = Find(uid, container);
    const uint64_t starts = c.ok() ? (*c)->starts : 0;
    if (*previous) {
      if (starts < 2) {
        return BadRequest(absl::StrCat("previous terminated container \"", container,
                                       "\" in pod \"", pod_name, "\" not found"));
      }
      run_number = starts - 2;
    } else {
      if (starts == 0) {
        const std::string reason = WaitingReason(pod, container);
        std::string why = " - no logs yet";
        if (reason == "ErrImagePull") {
          why = ": image can't be pulled";
        } else if (reason == "ImagePullBackOff") {
          why = ": trying and failing to pull image";
        } else if (!reason.empty()) {
          why = ": " + reason;
        }
        return BadRequest(absl::StrCat("container \"", container, "\" in pod \"", pod_name,
                                       "\" is waiting to start", why));
      }
      run_number = starts - 1;
    }
    drop_generation = drop_generation_;
  }

  if (!start()) return std::nullopt;
  size_t position = 0;
  for (;;) {
    std::vector<std::string> out;
    bool end = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // The run, or null once it is gone (the pod deleted, or rotated out).
      auto run = [&]() -> Run* {
        absl::StatusOr<Container*> c = Find(uid, container);
        if (!c.ok()) return nullptr;
        const uint64_t first = (*c)->starts - (*c)->runs.size();
        if (run_number < first) return nullptr;
        return &(*c)->runs[run_number - first];
      };
      if (*follow) {
        changed_.wait(lock, [&] {
          Run* r = run();
          return stopping_ || drop_generation_ != drop_generation || r == nullptr || r->ended ||
                 r->lines.size() > position;
        });
      }
      Run* r = run();
      if (stopping_ || drop_generation_ != drop_generation || r == nullptr) {
        end = true;
      } else {
        for (; position < r->lines.size(); ++position) {
          const Line& line = r->lines[position];
          if (line.time < since) continue;
          out.push_back(*timestamps ? absl::StrCat(absl::FormatTime("%Y-%m-%d%ET%H:%M:%E*SZ",
                                                                    line.time, absl::UTCTimeZone()),
                                                   " ", line.text, "\n")
                                    : absl::StrCat(line.text, "\n"));
        }
        end = !*follow || r->ended;
      }
    }
    for (const std::string& line : out) {
      if (!write(line)) return std::nullopt;
    }
    if (end) return std::nullopt;
  }
}

}  // namespace kubetrain::fake_apiserver
