#include "trainer-runtime/dist/strategy/parameter_server.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "trainer-runtime/dist/grpc/grpc_transport.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/optimizer.h"
#include "trainer-runtime/engine/variable_store.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::dist {
namespace {

using runtime::engine::NamedGradient;
using runtime::engine::Tensor;
using runtime::engine::TrainingContext;

enum RequestType : uint64_t {
  kInit = 1,
  kPull = 2,
  kPush = 3,
  kSnapshot = 4,
  kDone = 5,
  kLeave = 6
};
enum ReplyFlags : uint64_t { kOk = 0, kDropped = 1, kFinished = 2, kFailed = 4 };

constexpr Tag kRequestTag = 1;
constexpr Tag kRequestPayloadTag = 2;
constexpr Tag kReplyTag = 3;
constexpr Tag kReplyPayloadTag = 4;

struct Header {
  uint64_t type = 0;  // request type; in replies, ReplyFlags
  int64_t step = 0;
  uint64_t payload_bytes = 0;
  uint64_t extra = 0;
};
static_assert(sizeof(Header) == 32);

absl::Span<std::byte> AsBytes(Header& h) { return {reinterpret_cast<std::byte*>(&h), sizeof(h)}; }

absl::Status SendMessage(Transport& t, int peer, Tag header_tag, Tag payload_tag, Header header,
                         absl::Span<const std::byte> payload, absl::Time deadline) {
  header.payload_bytes = payload.size();
  RETURN_IF_ERROR(t.Send(peer, header_tag, AsBytes(header), deadline));
  if (!payload.empty()) RETURN_IF_ERROR(t.Send(peer, payload_tag, payload, deadline));
  return absl::OkStatus();
}

// The payload has a deadline of its own: a receiver that polls for headers
// with a short deadline must not give up between a header and its payload,
// or the payload is left behind and the next header read waits forever.
absl::Status RecvMessage(Transport& t, int peer, Tag header_tag, Tag payload_tag, Header* header,
                         std::string* payload, absl::Time header_deadline,
                         absl::Time payload_deadline) {
  RETURN_IF_ERROR(t.Recv(peer, header_tag, AsBytes(*header), header_deadline));
  payload->resize(header->payload_bytes);
  if (header->payload_bytes > 0) {
    absl::Status s = t.Recv(
        peer, payload_tag,
        absl::Span<std::byte>(reinterpret_cast<std::byte*>(payload->data()), payload->size()),
        payload_deadline);
    if (s.code() == absl::StatusCode::kDeadlineExceeded && payload_deadline != header_deadline) {
      // Not the header poll's timeout: the peer sent a header and never its
      // payload.
      return absl::UnavailableError(absl::StrCat("the payload of a ", header->payload_bytes,
                                                 "-byte message never arrived: ", s.message()));
    }
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

// The group: replicas (ranks 0..R-1, chief first), then ps tasks.
std::vector<std::string> GroupAddresses(const ClusterSpec& cluster) {
  std::vector<std::string> addresses = cluster.ReplicaAddresses();
  for (const auto& a : cluster.Tasks(api::Role::kParameterServer)) addresses.push_back(a);
  return addresses;
}

absl::StatusOr<std::unique_ptr<GrpcTransport>> Join(const ClusterSpec& cluster, int rank,
                                                    absl::Duration timeout) {
  GrpcTransport::Options options;
  options.group = "kubetrain-ps";
  return GrpcTransport::Join(GroupAddresses(cluster), rank, options, absl::Now() + timeout);
}

// ---------------------------------------------------------------------------
// The ps task.

class ParameterShardServer {
 public:
  ParameterShardServer(const ClusterSpec& cluster, const runtime::engine::TrainerOptions& options,
                       const ParameterServerOptions& ps_options, Transport& transport)
      : cluster_(cluster),
        options_(options),
        ps_options_(ps_options),
        transport_(transport),
        replicas_(cluster.NumReplicas()),
        device_(1) {}

  absl::Status Run() {
    runtime::engine::OptimizerOptions oo;
    oo.learning_rate = options_.learning_rate;
    ASSIGN_OR_RETURN(std::unique_ptr<runtime::engine::Optimizer> optimizer,
                     runtime::engine::Optimizer::Create(options_.optimizer, oo, device_));
    {
      // No replica thread runs yet; the lock is what the field's contract asks.
      absl::MutexLock lock(&mu_);
      optimizer_ = std::move(optimizer);
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < replicas_; ++r) threads.emplace_back([this, r] { ServeReplica(r); });
    absl::Status result;
    {
      absl::MutexLock lock(&mu_);
      // Until the chief is done (or the ps failed), then until the workers
      // have left or the grace period is over.
      mu_.Await(absl::Condition(
          +[](ParameterShardServer* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->done_ || !s->failure_.ok(); },
          this));
      result = failure_;
      auto all_left = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return left_ == replicas_; };
      mu_.AwaitWithTimeout(absl::Condition(&all_left), ps_options_.finish_grace);
      stopping_ = true;
    }
    for (auto& t : threads) t.join();
    return result;
  }

 private:
  std::string TaskName(int replica) const {
    return cluster_.TaskName(cluster_.Replicas()[replica]);
  }

  // One thread per replica: its requests in order.
  void ServeReplica(int replica) {
    Header request;
    std::string payload;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
      }
      // Polls for a request once a second (to notice stopping_), then waits
      // for its payload as long as for any request.
      const absl::Time now = absl::Now();
      absl::Status s =
          RecvMessage(transport_, replica, kRequestTag, kRequestPayloadTag, &request, &payload,
                      now + absl::Seconds(1), now + ps_options_.request_timeout);
      if (s.code() == absl::StatusCode::kDeadlineExceeded) continue;
      if (!s.ok()) {
        Lost(replica, s);
        break;
      }
      Header reply;
      std::string reply_payload;
      absl::Status handled = Handle(replica, request, payload, &reply, &reply_payload);
      if (!handled.ok()) {
        reply.type = kFailed;
        reply_payload = std::string(handled.message());
      }
      s = SendMessage(
          transport_, replica, kReplyTag, kReplyPayloadTag, reply,
          absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(reply_payload.data()),
                                      reply_payload.size()),
          absl::Now() + ps_options_.request_timeout);
      if (!s.ok()) {
        Lost(replica, s);
        break;
      }
    }
    absl::MutexLock lock(&mu_);
    ++left_;
  }

  void Lost(int replica, const absl::Status& why) {
    absl::MutexLock lock(&mu_);
    // A worker that said goodbye, or leaves after the chief is done, is just
    // finishing.
    if (done_ || departed_.count(replica) > 0) return;
    const bool fatal = replica == 0 || ps_options_.sync_replicas;
    if (fatal && failure_.ok()) {
      failure_ = absl::UnavailableError(absl::StrCat("ps ", cluster_.TaskName(), ": lost ",
                                                     TaskName(replica), ": ", why.message()));
    }
  }

  absl::Status Handle(int replica, const Header& request, const std::string& payload, Header* reply,
                      std::string* reply_payload) {
    absl::MutexLock lock(&mu_);
    switch (request.type) {
      case kInit: {
        v1::Checkpoint shard;
        if (!shard.ParseFromString(payload)) return absl::DataLossError("INIT: bad shard");
        runtime::engine::VariableStore store;
        order_.clear();
        for (const auto& t : shard.variables()) {
          ASSIGN_OR_RETURN(Tensor value, runtime::engine::TensorFromProto(t.value()));
          RETURN_IF_ERROR(store.Create(t.name(), value));
          order_.push_back(t.name());
        }
        variables_ = std::move(store);
        if (shard.has_optimizer()) {
          RETURN_IF_ERROR(optimizer_->RestoreState(shard.optimizer()));
        } else {
          runtime::engine::OptimizerOptions oo;
          oo.learning_rate = options_.learning_rate;
          ASSIGN_OR_RETURN(optimizer_,
                           runtime::engine::Optimizer::Create(options_.optimizer, oo, device_));
        }
        global_step_ = shard.global_step();
        accumulated_.clear();
        contributors_.clear();
        initialized_ = true;
        break;
      }
      case kPull: {
        mu_.Await(absl::Condition(
            +[](ParameterShardServer* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
              return s->initialized_ || !s->failure_.ok();
            },
            this));
        RETURN_IF_ERROR(failure_);
        for (const std::string& name : order_) {
          const Tensor* t = variables_.Find(name);
          reply_payload->append(reinterpret_cast<const char*>(t->data()),
                                t->num_elements() * sizeof(float));
        }
        break;
      }
      case kPush:
        RETURN_IF_ERROR(Push(replica, request, payload, reply));
        break;
      case kSnapshot: {
        v1::Checkpoint shard;
        shard.set_global_step(global_step_);
        for (const std::string& name : order_) {
          auto* t = shard.add_variables();
          t->set_name(name);
          runtime::engine::TensorToProto(*variables_.Find(name), t->mutable_value());
        }
        RETURN_IF_ERROR(optimizer_->SaveState(shard.mutable_optimizer()));
        if (!shard.SerializeToString(reply_payload)) {
          return absl::InternalError("could not serialise the parameter-server snapshot");
        }
        break;
      }
      case kDone:
        done_ = true;
        break;
      case kLeave:
        departed_.insert(replica);
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("unknown request ", request.type));
    }
    reply->step = global_step_;
    if (done_) reply->type |= kFinished;
    return absl::OkStatus();
  }

  absl::Status Push(int replica, const Header& request, const std::string& payload, Header* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!initialized_) return absl::FailedPreconditionError("PUSH before INIT");
    if (done_) return absl::OkStatus();  // the run is over; nothing to apply
    size_t total = 0;
    for (const std::string& name : order_) total += variables_.Find(name)->num_elements();
    if (payload.size() != total * sizeof(float)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PUSH of ", payload.size(), " bytes, want ", total * sizeof(float)));
    }
    const float* grads = reinterpret_cast<const float*>(payload.data());
    if (!ps_options_.sync_replicas) {
      return Apply(grads, 1.0f);
    }
    // Sync: one gradient per replica for the current step.
    if (request.step != global_step_ || contributors_.count(replica) > 0) {
      reply->type |= kDropped;  // stale
      return absl::OkStatus();
    }
    if (accumulated_.empty()) accumulated_.assign(total, 0.0f);
    for (size_t i = 0; i < total; ++i) accumulated_[i] += grads[i];
    contributors_.insert(replica);
    const int64_t step = global_step_;
    if (static_cast<int>(contributors_.size()) == replicas_) {
      std::vector<float> sum = std::move(accumulated_);
      accumulated_.clear();
      contributors_.clear();
      RETURN_IF_ERROR(Apply(sum.data(), 1.0f / replicas_));
    } else {
      // Wait for the others: the reply says the step is complete.
      auto advanced = [this, step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return global_step_ > step || done_ || !failure_.ok();
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&advanced), ps_options_.request_timeout)) {
        return absl::DeadlineExceededError(absl::StrCat("sync step ", step, " never completed"));
      }
      RETURN_IF_ERROR(failure_);
    }
    return absl::OkStatus();
  }

  absl::Status Apply(const float* grads, float scale) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<NamedGradient> gradients;
    std::vector<float> scaled;
    size_t total = 0;
    for (const std::string& name : order_) total += variables_.Find(name)->num_elements();
    if (scale != 1.0f) {
      scaled.assign(grads, grads + total);
      for (float& g : scaled) g *= scale;
      grads = scaled.data();
    }
    size_t at = 0;
    for (const std::string& name : order_) {
      const Tensor* v = variables_.Find(name);
      gradients.push_back(
          {name, Tensor::WrapHost(v->shape(), const_cast<float*>(grads + at), nullptr)});
      at += v->num_elements();
    }
    RETURN_IF_ERROR(optimizer_->Apply(variables_, gradients));
    ++global_step_;
    return absl::OkStatus();
  }

  const ClusterSpec& cluster_;
  const runtime::engine::TrainerOptions& options_;
  const ParameterServerOptions ps_options_;
  Transport& transport_;
  const int replicas_;
  runtime::engine::CpuDevice device_;

  absl::Mutex mu_;
  std::unique_ptr<runtime::engine::Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  runtime::engine::VariableStore variables_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int left_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t global_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<float> accumulated_ ABSL_GUARDED_BY(mu_);
  std::set<int> contributors_ ABSL_GUARDED_BY(mu_);
  std::set<int> departed_ ABSL_GUARDED_BY(mu_);  // replicas that sent LEAVE
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------
// The replica side.

class ParameterServerStrategy final : public runtime::engine::TrainingStrategy {
 public:
  ParameterServerStrategy(const ClusterSpec& cluster, const ParameterServerOptions& options,
                          std::unique_ptr<Transport> transport)
      : cluster_(cluster),
        options_(options),
        transport_(std::move(transport)),
        replicas_(cluster.NumReplicas()),
        num_ps_(cluster.NumTasks(api::Role::kParameterServer)),
        rank_(*cluster.ReplicaRank()) {}

  bool IsChief() const override { return rank_ == 0; }
  int shard_index() const override { return rank_; }
  int shard_count() const override { return replicas_; }

  absl::StatusOr<int64_t> Initialize(TrainingContext& ctx,
                                     const v1::Checkpoint* restored) override {
    // Every replica needs the shapes; the chief's values are the ones used.
    if (restored != nullptr) {
      RETURN_IF_ERROR(ctx.RestoreLocal(*restored));
    } else {
      RETURN_IF_ERROR(
          runtime::engine::InitializeVariables(ctx.model.graph, ctx.options.seed, ctx.variables));
    }
    std::vector<std::pair<std::string, int64_t>> sizes;
    for (const auto& [name, t] : ctx.variables.values()) sizes.push_back({name, t.num_elements()});
    std::vector<int> placement = PlaceVariables(sizes, num_ps_);
    shards_.assign(num_ps_, {});
    for (size_t i = 0; i < sizes.size(); ++i) shards_[placement[i]].push_back(sizes[i].first);
    if (rank_ == 0) {
      v1::Checkpoint full;
      RETURN_IF_ERROR(ctx.SnapshotLocal(restored != nullptr ? restored->global_step() : 0, &full));
      for (int p = 0; p < num_ps_; ++p) {
        v1::Checkpoint shard;
        shard.set_global_step(full.global_step());
        std::set<std::string> mine(shards_[p].begin(), shards_[p].end());
        for (const auto& t : full.variables()) {
          if (mine.count(t.name())) *shard.add_variables() = t;
        }
        if (restored != nullptr && restored->has_optimizer()) {
          auto* opt = shard.mutable_optimizer();
          opt->set_type(full.optimizer().type());
          opt->set_iterations(full.optimizer().iterations());
          for (const auto& s : full.optimizer().slots()) {
            std::string variable = s.name().substr(0, s.name().rfind('/'));
            if (mine.count(variable)) *opt->add_slots() = s;
          }
        }
        std::string bytes;
        shard.SerializeToString(&bytes);
        Header reply;
        std::string ignored;
        RETURN_IF_ERROR(Request(p, Header{kInit}, bytes, &reply, &ignored));
      }
    }
    return Pull(ctx);
  }

  absl::StatusOr<StepResult> Step(TrainingContext& ctx, const runtime::data::Batch& batch,
                                  int64_t global_step) override {
    if (finished_) return StepResult{global_step, 0, 0};
    ASSIGN_OR_RETURN(int64_t step, Pull(ctx));
    if (finished_) return StepResult{step, 0, 0};
    ASSIGN_OR_RETURN(runtime::engine::GradientResult g, ctx.ComputeGradients(batch, step));
    std::map<std::string, const Tensor*> by_name;
    for (const NamedGradient& n : g.gradients) by_name[n.name] = &n.gradient;
    int64_t new_step = step;
    for (int p = 0; p < num_ps_; ++p) {
      std::string payload;
      for (const std::string& name : shards_[p]) {
        auto it = by_name.find(name);
        if (it == by_name.end()) return absl::InternalError(absl::StrCat("no gradient for ", name));
        payload.append(reinterpret_cast<const char*>(it->second->data()),
                       it->second->num_elements() * sizeof(float));
      }
      Header reply;
      std::string ignored;
      RETURN_IF_ERROR(Request(p, Header{kPush, step}, payload, &reply, &ignored));
      new_step = std::max(new_step, reply.step);
    }
    // Async: other workers' pushes advance the step too; at least ours did.
    return StepResult{std::max(new_step, step + 1), g.loss, g.accuracy};
  }

  absl::Status SyncVariables(TrainingContext& ctx) override {
    absl::Status pulled = Pull(ctx).status();
    // Once the chief is done the ps tasks may be gone: keep the last values.
    return finished_ ? absl::OkStatus() : pulled;
  }

  absl::Status Snapshot(TrainingContext& ctx, int64_t global_step,
                        v1::Checkpoint* checkpoint) override {
    checkpoint->Clear();
    checkpoint->set_global_step(global_step);
    for (int p = 0; p < num_ps_; ++p) {
      Header reply;
      std::string bytes;
      RETURN_IF_ERROR(Request(p, Header{kSnapshot}, "", &reply, &bytes));
      v1::Checkpoint shard;
      if (!shard.ParseFromString(bytes)) return absl::DataLossError("bad snapshot from a ps");
      for (auto& t : *shard.mutable_variables()) *checkpoint->add_variables() = std::move(t);
      auto* opt = checkpoint->mutable_optimizer();
      opt->set_type(shard.optimizer().type());
      opt->set_iterations(std::max(opt->iterations(), shard.optimizer().iterations()));
      for (auto& s : *shard.mutable_optimizer()->mutable_slots()) *opt->add_slots() = std::move(s);
    }
    return absl::OkStatus();
  }

  // The chief ends the run (DONE); a worker says it leaves on purpose
  // (LEAVE), so that a sync ps does not take its exit for a crash. A ps that
  // is already gone after the chief is done is no error.
  absl::Status Finish(TrainingContext& ctx) override {
    for (int p = 0; p < num_ps_; ++p) {
      Header reply;
      std::string ignored;
      absl::Status s = Request(p, Header{rank_ == 0 ? kDone : kLeave}, "", &reply, &ignored);
      if (!s.ok() && (rank_ == 0 || !finished_)) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::string PsName(int p) const {
    return absl::StrCat(cluster_.TaskName(TaskId{api::Role::kParameterServer, p}), " (",
                        cluster_.Tasks(api::Role::kParameterServer)[p], ")");
  }

  absl::Status Request(int p, Header request, const std::string& payload, Header* reply,
                       std::string* reply_payload) {
    const int peer = replicas_ + p;
    const absl::Time deadline = absl::Now() + options_.request_timeout;
    absl::Status s =
        SendMessage(*transport_, peer, kRequestTag, kRequestPayloadTag, request,
                    absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(payload.data()),
                                                payload.size()),
                    deadline);
    if (s.ok()) {
      s = RecvMessage(*transport_, peer, kReplyTag, kReplyPayloadTag, reply, reply_payload,
                      deadline, deadline);
    }
    if (!s.ok()) {
      return runtime::WithExitCode(
          absl::Status(s.code(), absl::StrCat(cluster_.TaskName(), ": parameter server ", PsName(p),
                                              " failed: ", s.message())),
          runtime::kExitRetryable);
    }
    if (reply->type & kFailed) {
      return runtime::WithExitCode(absl::UnavailableError(absl::StrCat(
                                       "parameter server ", PsName(p), ": ", *reply_payload)),
                                   runtime::kExitRetryable);
    }
    if (reply->type & kFinished) finished_ = true;
    return absl::OkStatus();
  }

  // Fetches every shard into ctx.variables; returns the global step.
  absl::StatusOr<int64_t> Pull(TrainingContext& ctx) {
    int64_t step = 0;
    for (int p = 0; p < num_ps_; ++p) {
      Header reply;
      std::string values;
      RETURN_IF_ERROR(Request(p, Header{kPull}, "", &reply, &values));
      size_t at = 0;
      for (const std::string& name : shards_[p]) {
        Tensor* t = ctx.variables.Find(name);
        const size_t bytes = t->num_elements() * sizeof(float);
        if (at + bytes > values.size())
          return absl::DataLossError(absl::StrCat("short PULL from ", PsName(p)));
        std::memcpy(t->data(), values.data() + at, bytes);
        at += bytes;
      }
      step = std::max(step, reply.step);
    }
    return step;
  }

  const ClusterSpec cluster_;
  const ParameterServerOptions options_;
  std::unique_ptr<Transport> transport_;
  const int replicas_;
  const int num_ps_;
  const int rank_;
  std::vector<std::vector<std::string>> shards_;
  bool finished_ = false;
};

}  // namespace

std::vector<int> PlaceVariables(const std::vector<std::pair<std::string, int64_t>>& variables,
                                int num_ps) {
  std::vector<size_t> order(variables.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (variables[a].second != variables[b].second)
      return variables[a].second > variables[b].second;
    return variables[a].first < variables[b].first;
  });
  std::vector<int64_t> load(std::max(num_ps, 1), 0);
  std::vector<int> placement(variables.size(), 0);
  for (size_t i : order) {
    int best = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    placement[i] = best;
    load[best] += variables[i].second;
  }
  return placement;
}

absl::Status ServeParameters(const ClusterSpec& cluster,
                             const runtime::engine::TrainerOptions& options,
                             const ParameterServerOptions& ps_options) {
  const int rank = cluster.NumReplicas() + cluster.task().index;
  ASSIGN_OR_RETURN(std::unique_ptr<GrpcTransport> transport,
                   Join(cluster, rank, ps_options.connect_timeout));
  return ServeParametersOver(*transport, cluster, options, ps_options);
}

absl::Status ServeParametersOver(Transport& transport, const ClusterSpec& cluster,
                                 const runtime::engine::TrainerOptions& options,
                                 const ParameterServerOptions& ps_options) {
  ParameterShardServer server(cluster, options, ps_options, transport);
  return server.Run();
}

absl::StatusOr<std::unique_ptr<runtime::engine::TrainingStrategy>> MakeParameterServerStrategy(
    const ClusterSpec& cluster, const runtime::engine::TrainerOptions& options,
    const ParameterServerOptions& ps_options) {
  ASSIGN_OR_RETURN(std::unique_ptr<GrpcTransport> transport,
                   Join(cluster, *cluster.ReplicaRank(), ps_options.connect_timeout));
  return MakeParameterServerStrategyOver(std::move(transport), cluster, ps_options);
}

std::unique_ptr<runtime::engine::TrainingStrategy> MakeParameterServerStrategyOver(
    std::unique_ptr<Transport> transport, const ClusterSpec& cluster,
    const ParameterServerOptions& ps_options) {
  return std::make_unique<ParameterServerStrategy>(cluster, ps_options, std::move(transport));
}

}  // namespace kubetrain::dist
