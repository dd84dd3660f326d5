#include "operator/kube/leader_election.h"

#include <iostream>

#include "absl/time/clock.h"

namespace kubetrain::kube {

using nlohmann::json;

std::string FormatMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

LeaderElector::LeaderElector(ClusterClient* client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)) {}

LeaderElector::~LeaderElector() { Stop(); }

absl::StatusOr<bool> LeaderElector::TryAcquireOrRenew(absl::Time now) {
  const int duration_seconds = static_cast<int>(absl::ToInt64Seconds(config_.lease_duration) > 0
                                                    ? absl::ToInt64Seconds(config_.lease_duration)
                                                    : 1);
  json spec = {{"holderIdentity", config_.identity},
               {"leaseDurationSeconds", duration_seconds},
               {"acquireTime", FormatMicroTime(now)},
               {"renewTime", FormatMicroTime(now)},
               {"leaseTransitions", 0}};
  auto lease = client_->Get(kLeases, config_.ns, config_.lease_name);
  if (lease.status().code() == absl::StatusCode::kNotFound) {
    json object = {{"apiVersion", kLeases.api_version},
                   {"kind", kLeases.kind},
                   {"metadata", {{"name", config_.lease_name}, {"namespace", config_.ns}}},
                   {"spec", spec}};
    auto created = client_->Create(kLeases, config_.ns, object);
    if (created.status().code() == absl::StatusCode::kAlreadyExists) return false;
    if (!created.ok()) return created.status();
    absl::MutexLock lock(&mu_);
    observed_record_ = config_.identity + "|" + spec["renewTime"].get<std::string>();
    observed_time_ = now;
    leader_ = true;
    return true;
  }
  if (!lease.ok()) return lease.status();

  json current =
      lease->contains("spec") && (*lease)["spec"].is_object() ? (*lease)["spec"] : json::object();
  std::string holder = current.value("holderIdentity", "");
  std::string renew = current.value("renewTime", "");
  int held_for = current.value("leaseDurationSeconds", duration_seconds);
  {
    absl::MutexLock lock(&mu_);
    std::string record = holder + "|" + renew;
    if (record != observed_record_) {
      observed_record_ = record;
      observed_time_ = now;
    }
    if (!holder.empty() && holder != config_.identity &&
        now < observed_time_ + absl::Seconds(held_for)) {
      leader_ = false;
      return false;  // someone else holds a live lease
    }
  }
  json updated = *lease;
  if (holder == config_.identity) {
    spec["acquireTime"] = current.value("acquireTime", spec["acquireTime"].get<std::string>());
    spec["leaseTransitions"] = current.value("leaseTransitions", 0);
  } else {
    spec["leaseTransitions"] = current.value("leaseTransitions", 0) + 1;
  }
  updated["spec"] = spec;
  auto written = client_->Update(kLeases, config_.ns, updated, /*status=*/false);
  if (written.status().code() == absl::StatusCode::kAborted) {
    leader_ = false;
    return false;  // lost the race (409 Conflict)
  }
  if (!written.ok()) return written.status();
  absl::MutexLock lock(&mu_);
  observed_record_ = config_.identity + "|" + spec["renewTime"].get<std::string>();
  observed_time_ = now;
  leader_ = true;
  return true;
}

absl::Status LeaderElector::Release(absl::Time now) {
  if (!leader_.load()) return absl::OkStatus();
  auto lease = client_->Get(kLeases, config_.ns, config_.lease_name);
  if (!lease.ok()) return lease.status();
  if ((*lease)["spec"].value("holderIdentity", "") != config_.identity) {
    leader_ = false;
    return absl::OkStatus();
  }
  json updated = *lease;
  updated["spec"]["holderIdentity"] = "";
  updated["spec"]["leaseDurationSeconds"] = 1;
  updated["spec"]["renewTime"] = FormatMicroTime(now);
  leader_ = false;
  return client_->Update(kLeases, config_.ns, updated, false).status();
}

void LeaderElector::Start(std::function<void()> on_started, std::function<void()> on_stopped) {
  thread_ = std::thread([this, on_started = std::move(on_started),
                         on_stopped = std::move(on_stopped)] { Loop(on_started, on_stopped); });
}

void LeaderElector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::Status released = Release(absl::Now());
  if (!released.ok()) std::cerr << "leader election: release: " << released << "\n";
}

void LeaderElector::Loop(std::function<void()> on_started, std::function<void()> on_stopped) {
  absl::Time last_renew = absl::InfinitePast();
  bool leading = false;
  for (;;) {
    absl::Time now = absl::Now();
    auto held = TryAcquireOrRenew(now);
    if (!held.ok()) {
      std::cerr << "leader election: " << held.status() << "\n";
    }
    if (held.ok() && *held) {
      last_renew = now;
      if (!leading) {
        leading = true;
        std::cerr << "leader election: " << config_.identity << " is the leader\n";
        if (on_started) on_started();
      }
    } else if (leading && (held.ok() || now - last_renew > config_.renew_deadline)) {
      // Someone else holds it now, or we could not renew in time.
      leading = false;
      leader_ = false;
      std::cerr << "leader election: " << config_.identity << " lost the lease\n";
      if (on_stopped) on_stopped();
    }
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), config_.retry_period)) return;
  }
}

}  // namespace kubetrain::kube
