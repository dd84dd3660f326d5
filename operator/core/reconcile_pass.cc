#include "operator/core/reconcile_pass.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "operator/core/gang_admission.h"

namespace kubetrain::core::internal {
namespace {

// Termination messages are the user's; keep status small.
constexpr size_t kMaxMessageLength = 1024;

}  // namespace

absl::Time FromProto(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

void ToProto(absl::Time t, google::protobuf::Timestamp* ts) {
  const int64_t seconds = absl::ToUnixSeconds(t);
  ts->set_seconds(seconds);
  ts->set_nanos(static_cast<int32_t>((t - absl::FromUnixSeconds(seconds)) / absl::Nanoseconds(1)));
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

std::string Truncate(std::string text) {
  if (text.size() > kMaxMessageLength) {
    text.resize(kMaxMessageLength);
    text += "...";
  }
  return text;
}

std::string DurationText(absl::Duration d) { return absl::FormatDuration(d); }

// An objective as the trainer reported it: the shortest text that reads back
// as the same double ("0.8804", not std::to_string's "0.880400").
std::string ObjectiveText(double value) {
  char text[64];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, end.ptr);
}

bool IsStudy(const v1::TrainingJob& job) {
  return job.spec().training_input().hyperparameters().params_size() > 0;
}

// ---- Conditions --------------------------------------------------------

v1::Condition* FindCondition(v1::TrainingJobStatus* status, const std::string& type) {
  for (v1::Condition& c : *status->mutable_conditions()) {
    if (c.type() == type) return &c;
  }
  return nullptr;
}

bool ConditionIsTrue(const v1::TrainingJobStatus& status, const std::string& type) {
  for (const v1::Condition& c : status.conditions()) {
    if (c.type() == type) return c.status() == "True";
  }
  return false;
}

// Sets a condition; returns true when it became true just now. A condition
// that never existed is not added as "False": absent reads as false.
bool SetCondition(v1::TrainingJobStatus* status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, absl::Time now) {
  const std::string value_text = value ? "True" : "False";
  v1::Condition* c = FindCondition(status, type);
  if (c == nullptr) {
    if (!value) return false;
    c = status->add_conditions();
    c->set_type(type);
  } else if (c->status() == value_text && c->reason() == reason && c->message() == message) {
    return false;
  }
  const bool transition = c->status() != value_text;
  c->set_status(value_text);
  c->set_reason(reason);
  c->set_message(message);
  ToProto(now, c->mutable_last_update_time());
  if (transition) ToProto(now, c->mutable_last_transition_time());
  return transition && value;
}

// ---- Describing replicas -------------------------------------------------

bool IsLost(const ObservedReplica& r) { return r.phase == ReplicaPhase::kUnknown || r.node_lost; }

std::string DescribeFailure(const ObservedReplica& r, bool use_chief) {
  const std::string task = TaskName(r.key, use_chief);
  std::string text;
  if (r.node_lost) {
    text = task + " was lost: its node is unreachable";
  } else if (r.phase == ReplicaPhase::kUnknown) {
    text = task + " is in phase Unknown: its node is unreachable";
  } else if (r.exit_code.has_value()) {
    text = task + " exited with code " + std::to_string(*r.exit_code);
    if (!r.reason.empty() && r.reason != "Error") text += " (" + r.reason + ")";
  } else {
    text = task + " failed: " + (r.reason.empty() ? std::string("pod failed") : r.reason);
  }
  if (!r.termination_message.empty()) text += ": " + r.termination_message;
  return Truncate(text);
}

absl::Duration RecreateBackoff(int restarts, absl::Duration base) {
  if (restarts <= 0) return absl::ZeroDuration();
  absl::Duration delay = std::min(base, kRecreateBackoffMax);
  for (int i = 1; i < restarts && delay < kRecreateBackoffMax; ++i) delay *= 2;
  return std::min(delay, kRecreateBackoffMax);
}

ReplicaKey ChiefOf(const Context& c, const std::string& trial_id) {
  return ReplicaKey{trial_id, api::ChiefRole(c.groups), 0};
}

// Deletes a replica (and its Service) unless deletion is already under way;
// force-deletes one stuck past its grace period.
void DeleteReplicaOnce(Context& c, const ObservedReplica& r, const std::string& reason,
                       bool with_service) {
  if (!r.deletion_requested) {
    c.result.actions.push_back(DeleteReplica{r.name, IsLost(r), reason});
  } else if (r.phase != ReplicaPhase::kSucceeded && r.phase != ReplicaPhase::kFailed) {
    if (c.now >= r.deletion_time) {
      c.result.actions.push_back(DeleteReplica{r.name, true, reason + " (stuck terminating)"});
    } else {
      c.RequeueAt(r.deletion_time);
    }
  }
  if (with_service && c.options.services && c.ServiceObserved(r.name)) {
    c.result.actions.push_back(DeleteService{r.name});
  }
}

const ObservedReplica* UnplacedPastTimeout(
    Context& c, const std::function<bool(const ObservedReplica&)>& of_gang) {
  const v1::SchedulingPolicy& policy = c.policy().scheduling_policy();
  const absl::Duration timeout = policy.has_schedule_timeout_seconds()
                                     ? absl::Seconds(policy.schedule_timeout_seconds())
                                     : kDefaultScheduleTimeout;
  const ObservedReplica* stuck = nullptr;
  for (const ObservedReplica& r : c.observed.replicas) {
    if (r.deletion_requested || r.phase != ReplicaPhase::kPending || !r.waiting ||
        r.waiting->reason != "Unschedulable" || !of_gang(r)) {
      continue;
    }
    if (c.now - r.created < timeout) {
      c.RequeueAt(r.created + timeout);
      continue;
    }
    if (stuck == nullptr) stuck = &r;
  }
  return stuck;
}

std::string UnplacedReplicaText(const Context& c, const ObservedReplica& stuck) {
  return absl::StrCat(TaskName(stuck.key, c.use_chief()), " could not be placed for ",
                      absl::FormatDuration(c.now - stuck.created), " (", stuck.waiting->message,
                      ")");
}

}  // namespace kubetrain::core::internal
