#include "proto/kubetrain/v1/metrics_reporter.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace kubetrain::metrics {
namespace {

using std::chrono::milliseconds;

std::optional<std::string> ReadEnv(const GetEnvFn& getenv, const char* name) {
  if (getenv) return getenv(name);
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

absl::Status Unset(const char* name) {
  return absl::FailedPreconditionError(
      absl::StrCat(name, " is not set: the operator gives it to tuning trials"));
}

bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

// `status` with a note of how long it was retried, code unchanged.
absl::Status GaveUp(const absl::Status& status, int attempts, milliseconds elapsed) {
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (gave up after ", attempts, " attempts in ",
                                   absl::FormatDuration(absl::FromChrono(elapsed)), ")"));
}

}  // namespace

absl::StatusOr<MetricsReporter::Identity> MetricsReporter::Identity::FromEnvironment(
    const GetEnvFn& getenv) {
  auto required = [&](const char* name) -> absl::StatusOr<std::string> {
    std::optional<std::string> value = ReadEnv(getenv, name);
    if (!value || value->empty()) return Unset(name);
    return *std::move(value);
  };
  // The reconciler exports the job's namespace as is; a job stored without
  // one lives in "default", which is also what its Services are named in.
  std::optional<std::string> ns = ReadEnv(getenv, "KUBETRAIN_NAMESPACE");
  if (!ns) return Unset("KUBETRAIN_NAMESPACE");
  absl::StatusOr<std::string> name = required("KUBETRAIN_JOB_NAME");
  if (!name.ok()) return name.status();
  absl::StatusOr<std::string> trial = required("KUBETRAIN_TRIAL_ID");
  if (!trial.ok()) return trial.status();
  absl::StatusOr<std::string> type = required("KUBETRAIN_TASK_TYPE");
  if (!type.ok()) return type.status();
  absl::StatusOr<std::string> index = required("KUBETRAIN_TASK_INDEX");
  if (!index.ok()) return index.status();
  int parsed = 0;
  if (!absl::SimpleAtoi(*index, &parsed) || parsed < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("KUBETRAIN_TASK_INDEX is \"", *index, "\": must be a non-negative integer"));
  }
  Identity identity;
  identity.job = absl::StrCat(ns->empty() ? "default" : *ns, "/", *name);
  identity.trial = *std::move(trial);
  identity.task = absl::StrCat(*type, "-", parsed);
  return identity;
}

MetricsReporter::MetricsReporter(std::string address, Identity identity, std::string token)
    : address_(std::move(address)), identity_(std::move(identity)), token_(std::move(token)) {
  grpc::ChannelArguments args;
  // gRPC's defaults wait up to 120 s between reconnection attempts and 30 s
  // between DNS resolutions: longer than a report's whole retry budget. An
  // operator that fails over comes back at a new endpoint within seconds.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
  stub_ = v1::Metrics::NewStub(
      grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args));
}

std::unique_ptr<MetricsReporter> MetricsReporter::Create(const std::string& address,
                                                         Identity identity, std::string token) {
  return std::unique_ptr<MetricsReporter>(
      new MetricsReporter(address, std::move(identity), std::move(token)));
}

absl::StatusOr<std::unique_ptr<MetricsReporter>> MetricsReporter::FromEnvironment(
    Identity identity, const GetEnvFn& getenv) {
  std::optional<std::string> address = ReadEnv(getenv, "KUBETRAIN_METRICS_ADDR");
  if (!address || address->empty()) return Unset("KUBETRAIN_METRICS_ADDR");
  std::optional<std::string> token = ReadEnv(getenv, "KUBETRAIN_METRICS_TOKEN");
  if (!token || token->empty()) return Unset("KUBETRAIN_METRICS_TOKEN");
  return Create(*address, std::move(identity), *std::move(token));
}

absl::Status MetricsReporter::Report(int64_t step, const std::map<std::string, double>& values,
                                     milliseconds timeout, bool final) {
  v1::MetricsReportRequest request;
  request.set_job(identity_.job);
  request.set_trial(identity_.trial);
  request.set_task(identity_.task);
  request.set_step(step);
  request.set_token(token_);
  request.set_final(final);
  for (const auto& [tag, value] : values) (*request.mutable_values())[tag] = value;
  v1::MetricsReportResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) {
      return absl::CancelledError(
          absl::StrCat("metrics report to ", address_, " (step ", step, "): cancelled"));
    }
    in_flight_.insert(&context);
  }
  grpc::Status status = stub_->Report(&context, request, &response);
  {
    absl::MutexLock lock(&mu_);
    in_flight_.erase(&context);
  }
  if (status.ok()) return absl::OkStatus();
  // gRPC and absl share the canonical code numbering.
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      absl::StrCat("metrics report to ", address_, " (step ", step, "): ", status.error_message()));
}

absl::Status MetricsReporter::ReportWithRetry(int64_t step,
                                              const std::map<std::string, double>& values,
                                              const RetryOptions& retry, bool final) {
  auto now = [&retry] { return retry.now ? retry.now() : std::chrono::steady_clock::now(); };
  const auto start = now();
  milliseconds backoff = std::max(retry.initial_backoff, milliseconds(1));
  for (int attempts = 1;; ++attempts) {
    absl::Status status = Report(step, values, retry.attempt_timeout, final);
    if (status.ok() || !IsRetryable(status)) return status;
    const auto elapsed = std::chrono::duration_cast<milliseconds>(now() - start);
    const milliseconds remaining = retry.deadline - elapsed;
    if (remaining <= milliseconds(0)) return GaveUp(status, attempts, elapsed);
    const milliseconds pause = std::min(backoff, remaining);
    if (retry.wait) {
      if (!retry.wait(pause, status)) {
        return GaveUp(status, attempts, std::chrono::duration_cast<milliseconds>(now() - start));
      }
    } else {
      std::this_thread::sleep_for(pause);
    }
    backoff = std::min(backoff * 2, std::max(retry.max_backoff, milliseconds(1)));
  }
}

void MetricsReporter::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  // Safe from any thread, also before the call has started (it is then
  // cancelled as it starts).
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

QueuedMetricsReporter::QueuedMetricsReporter(std::unique_ptr<MetricsReporter> reporter,
                                             Options options)
    : reporter_(std::move(reporter)), options_(std::move(options)) {
  options_.max_pending = std::max<size_t>(options_.max_pending, 1);
  options_.retry.wait = [this](milliseconds backoff, const absl::Status& failure) {
    return WaitToRetry(backoff, failure);
  };
  thread_ = std::thread([this] { Run(); });
}

QueuedMetricsReporter::~QueuedMetricsReporter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  reporter_->Cancel();
  thread_.join();
}

void QueuedMetricsReporter::Enqueue(int64_t step, std::map<std::string, double> values,
                                    bool final) {
  std::optional<absl::Status> dropped;
  {
    absl::MutexLock lock(&mu_);
    pending_.push_back(Pending{++last_seq_, step, std::move(values), final});
    last_step_ = step;
    ++stats_.queued;
    if (pending_.size() > options_.max_pending) {
      dropped = absl::ResourceExhaustedError(absl::StrCat(
          "metrics report to ", reporter_->address(), " (step ", pending_.front().step,
          "): dropped, ", pending_.size() - 1, " newer reports were waiting to be sent"));
      pending_.pop_front();
      ++stats_.lost;
    }
  }
  if (dropped && options_.on_lost) options_.on_lost(*dropped);
}

bool QueuedMetricsReporter::WaitToRetry(milliseconds backoff, const absl::Status& failure) {
  absl::MutexLock lock(&mu_);
  last_error_ = failure;
  // Give up on a report when shutting down, or, at the end, when a newer
  // one waits: the last report is the one that must arrive.
  auto give_up = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || (flushing_ && !pending_.empty());
  };
  mu_.AwaitWithTimeout(absl::Condition(&give_up), absl::FromChrono(backoff));
  return !give_up();
}

void QueuedMetricsReporter::Run() {
  for (;;) {
    Pending next;
    absl::Status permanent;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !pending_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      next = std::move(pending_.front());
      pending_.pop_front();
      permanent = permanent_error_;
    }
    // Once the token has been refused, every later report would be too.
    absl::Status result = permanent.ok() ? reporter_->ReportWithRetry(next.step, next.values,
                                                                      options_.retry, next.final)
                                         : permanent;
    // The newest report's failure is Flush's answer while one waits (or the
    // queue is shutting down after it); any other lost report is told of,
    // including a newest one given up while nothing waited for it.
    bool flush_answers = false;
    {
      absl::MutexLock lock(&mu_);
      done_seq_ = next.seq;
      last_result_ = result;
      flush_answers = next.seq == last_seq_ && (flushing_ || stop_);
      if (result.ok()) {
        ++stats_.delivered;
      } else {
        ++stats_.lost;
        last_error_ = result;
        if (absl::IsPermissionDenied(result) && permanent_error_.ok()) permanent_error_ = result;
      }
    }
    if (!result.ok() && !flush_answers && options_.on_lost) options_.on_lost(result);
  }
}

absl::Status QueuedMetricsReporter::Flush(milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  const int64_t target = last_seq_;
  if (target == 0) return absl::OkStatus();
  flushing_ = true;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_seq_ >= target; };
  const bool finished = mu_.AwaitWithTimeout(absl::Condition(&done), absl::FromChrono(timeout));
  flushing_ = false;
  if (finished) return last_result_;
  return absl::DeadlineExceededError(absl::StrCat(
      "metrics report to ", reporter_->address(), " (step ", last_step_, "): not delivered within ",
      absl::FormatDuration(absl::FromChrono(timeout)), "; last error: ",
      last_error_.ok() ? "none, the operator has not answered" : last_error_.message()));
}

absl::Status QueuedMetricsReporter::permanent_error() const {
  absl::MutexLock lock(&mu_);
  return permanent_error_;
}

QueuedMetricsReporter::Stats QueuedMetricsReporter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kubetrain::metrics
