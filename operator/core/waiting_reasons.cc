#include "operator/core/waiting_reasons.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kubetrain::core {
namespace {

using nlohmann::json;

// A cause's words in the condition: enough to act on, small enough that
// kMaxWaitingCauses of them stay well under the status message limit.
constexpr size_t kMaxDetailLength = 300;
// Replicas named per cause before "and N more".
constexpr size_t kMaxTasksPerCause = 3;

const json* Field(const json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

std::string StringField(const json& object, const char* name) {
  const json* f = Field(object, name);
  return f != nullptr && f->is_string() ? f->get<std::string>() : std::string();
}

// What the kubelet shows while a container is on its way: not a cause.
bool OrdinaryWait(const std::string& reason) {
  return reason.empty() || reason == "ContainerCreating" || reason == "PodInitializing";
}

bool ImagePullReason(const std::string& reason) {
  return reason == "ErrImagePull" || reason == "ImagePullBackOff" || reason == "InvalidImageName" ||
         reason == "ErrImageNeverPull";
}

// One line, trimmed, at most kMaxDetailLength characters: the start of it,
// or for a crash's termination message (a traceback ends with its point) the
// end.
std::string Clip(std::string text, bool keep_end = false, size_t max_length = kMaxDetailLength) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  text = std::string(absl::StripAsciiWhitespace(text));
  if (text.size() <= max_length) return text;
  if (keep_end) return "..." + text.substr(text.size() - max_length);
  return text.substr(0, max_length) + "...";
}

struct CauseText {
  std::string key;   // stable while the cause lasts
  std::string text;  // what follows the replica's name
};

CauseText Describe(const ReplicaWaiting& w) {
  if (w.reason == "Unschedulable") {
    std::string text =
        "cannot be scheduled: " + (w.message.empty() ? "no node fits it" : Clip(w.message));
    return {text, text};
  }
  if (w.reason == kFailedCreateReason) {
    // `pods "NAME" is forbidden: ` repeats what the replica's name says; an
    // admission's reasons (Pod Security lists each rule) get room.
    std::string words = w.message;
    const std::string forbidden = " is forbidden: ";
    if (size_t at = words.find(forbidden);
        absl::StartsWith(words, "pods \"") && at != std::string::npos) {
      words = words.substr(at + forbidden.size());
    }
    std::string text = "cannot be created: " + Clip(words, false, 2 * kMaxDetailLength);
    return {text, text};
  }
  std::string who;
  if (!w.container.empty()) {
    who = absl::StrCat(w.init_container ? "init container \"" : "container \"", w.container, "\" ");
  }
  if (ImagePullReason(w.reason)) {
    // ErrImagePull and ImagePullBackOff take turns while the kubelet
    // retries: one cause, keyed by the image.
    std::string key = who + (w.image.empty() ? std::string("cannot pull its image")
                                             : absl::StrCat("cannot pull image \"", w.image, "\""));
    std::string text = absl::StrCat(key, " (", w.reason, ")");
    if (!w.message.empty()) absl::StrAppend(&text, ": ", Clip(w.message));
    return {key, text};
  }
  if (w.reason == "CrashLoopBackOff") {
    // The kubelet's message ("back-off 40s restarting failed container=...")
    // changes with every restart; the crash itself is the cause.
    std::string text = who + "keeps crashing (CrashLoopBackOff)";
    if (w.last_exit_code) absl::StrAppend(&text, ", last exit code ", *w.last_exit_code);
    if (!w.last_termination_message.empty()) {
      absl::StrAppend(&text, ": ", Clip(w.last_termination_message, /*keep_end=*/true));
    }
    return {text, text};
  }
  std::string text = absl::StrCat(who, "cannot start (", w.reason, ")");
  if (!w.message.empty()) absl::StrAppend(&text, ": ", Clip(w.message));
  return {text, text};
}

std::string JoinTasks(const std::vector<std::string>& tasks) {
  if (tasks.size() <= kMaxTasksPerCause) return absl::StrJoin(tasks, ", ");
  return absl::StrCat(
      absl::StrJoin(tasks.begin(), tasks.begin() + static_cast<ptrdiff_t>(kMaxTasksPerCause), ", "),
      " and ", tasks.size() - kMaxTasksPerCause, " more");
}

}  // namespace

std::optional<ReplicaWaiting> ReadPodWaiting(const json& pod, const std::string& main_container) {
  const json* status = Field(pod, "status");
  if (status == nullptr || !status->is_object()) return std::nullopt;
  const std::string phase = StringField(*status, "phase");
  if (phase == "Succeeded" || phase == "Failed") return std::nullopt;
  if (const json* conditions = Field(*status, "conditions");
      conditions != nullptr && conditions->is_array()) {
    for (const json& c : *conditions) {
      if (StringField(c, "type") == "PodScheduled" && StringField(c, "status") == "False" &&
          StringField(c, "reason") == "Unschedulable") {
        ReplicaWaiting w;
        w.reason = "Unschedulable";
        w.message = StringField(c, "message");
        return w;
      }
    }
  }
  // Init containers run first: while one waits, the others wait on it.
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    const json* statuses = Field(*status, list);
    if (statuses == nullptr || !statuses->is_array()) continue;
    for (const json& s : *statuses) {
      const json* state = Field(s, "state");
      const json* waiting = state == nullptr ? nullptr : Field(*state, "waiting");
      if (waiting == nullptr || !waiting->is_object()) continue;
      const std::string reason = StringField(*waiting, "reason");
      if (OrdinaryWait(reason)) continue;
      ReplicaWaiting w;
      w.reason = reason;
      w.message = StringField(*waiting, "message");
      const std::string name = StringField(s, "name");
      w.init_container = list == std::string("initContainerStatuses");
      if (w.init_container || name != main_container) w.container = name;
      w.image = StringField(s, "image");
      const json* last = Field(s, "lastState");
      const json* terminated = last == nullptr ? nullptr : Field(*last, "terminated");
      if (terminated != nullptr && terminated->is_object()) {
        if (const json* code = Field(*terminated, "exitCode");
            code != nullptr && code->is_number_integer()) {
          w.last_exit_code =
              static_cast<int>(std::clamp<int64_t>(code->get<int64_t>(), INT32_MIN, INT32_MAX));
        }
        w.last_termination_message = StringField(*terminated, "message");
      }
      return w;
    }
  }
  return std::nullopt;
}

WaitingSummary SummarizeWaiting(const std::vector<WaitingReplica>& replicas,
                                const std::string& previous_message) {
  struct Group {
    std::string reason;
    CauseText cause;
    std::vector<std::string> tasks;
  };
  std::vector<Group> groups;  // by cause key, in order of first appearance
  for (const WaitingReplica& r : replicas) {
    CauseText cause = Describe(r.waiting);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.cause.key == cause.key; });
    if (it == groups.end()) {
      groups.push_back({r.waiting.reason, std::move(cause), {}});
      it = groups.end() - 1;
    }
    it->tasks.push_back(r.task);
  }
  WaitingSummary summary;
  if (groups.empty()) return summary;
  summary.reason = groups.front().reason;
  std::vector<std::string> parts;
  size_t length = 0;
  for (size_t i = 0; i < groups.size() && i < kMaxWaitingCauses; ++i) {
    const Group& g = groups[i];
    std::string part = absl::StrCat(JoinTasks(g.tasks), " ", g.cause.text);
    // Whole causes only: one cut by the status's length limit would not be
    // found in the next summary's previous message, and be reported again
    // at every reconcile.
    if (!parts.empty() && length + 2 + part.size() > kMaxWaitingMessageLength) break;
    length += (parts.empty() ? 0 : 2) + part.size();
    if (previous_message.find(g.cause.key) == std::string::npos) {
      summary.new_causes.push_back({g.reason, part});
    }
    parts.push_back(std::move(part));
  }
  summary.message = absl::StrJoin(parts, "; ");
  if (groups.size() > parts.size()) {
    absl::StrAppend(&summary.message, "; and ", groups.size() - parts.size(), " more causes");
  }
  return summary;
}

}  // namespace kubetrain::core
