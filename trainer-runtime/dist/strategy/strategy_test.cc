#include <atomic>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/dist/in_process_transport.h"
#include "trainer-runtime/dist/strategy/all_reduce_strategy.h"
#include "trainer-runtime/dist/strategy/parameter_server.h"
#include "trainer-runtime/dist/strategy/task_runner.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::dist {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace engine = runtime::engine;

TEST(PlaceVariablesTest, GreedyBySizeLargestFirst) {
  // 1000 -> ps0, 600 -> ps1, 500 -> ps1 (600 < 1000), 10 -> ps0 (1000 < 1100),
  // 10 -> ps0 (1010 < 1100).
  std::vector<int> placement = PlaceVariables(
      {{"a/bias", 10}, {"a/kernel", 1000}, {"b/kernel", 600}, {"c/kernel", 500}, {"b/bias", 10}},
      2);
  EXPECT_THAT(placement, ElementsAre(0, 0, 1, 1, 0));
}

TEST(PlaceVariablesTest, SameAnswerWhateverTheInputOrder) {
  std::vector<std::pair<std::string, int64_t>> vars = {{"x", 5}, {"y", 5}, {"z", 5}, {"w", 7}};
  std::vector<int> forward = PlaceVariables(vars, 3);
  std::vector<std::pair<std::string, int64_t>> reversed(vars.rbegin(), vars.rend());
  std::vector<int> backward = PlaceVariables(reversed, 3);
  for (size_t i = 0; i < vars.size(); ++i) EXPECT_EQ(forward[i], backward[vars.size() - 1 - i]);
}

TEST(PlaceVariablesTest, OnePsTakesAll) {
  EXPECT_THAT(PlaceVariables({{"a", 1}, {"b", 2}}, 1), ElementsAre(0, 0));
}

TEST(DistributedFlagsTest, TakesItsFlagsAndLeavesTheRest) {
  std::vector<std::string> args = {
      "--batch_size=64",          "--strategy", "ps", "--sync-replicas", "--transport=grpc",
      "--connect_timeout_secs=5", "--seed=1"};
  auto flags = ExtractDistributedFlags(args);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->strategy, "ps");
  EXPECT_TRUE(flags->sync_replicas);
  EXPECT_EQ(flags->transport, "grpc");
  EXPECT_EQ(flags->connect_timeout, absl::Seconds(5));
  EXPECT_TRUE(flags->allreduce_overlap);
  EXPECT_EQ(flags->allreduce_bucket_bytes, size_t{4} << 20);
  EXPECT_THAT(args, ElementsAre("--batch_size=64", "--seed=1"));

  args = {"--allreduce-overlap=false", "--allreduce_bucket_kib", "256"};
  flags = ExtractDistributedFlags(args);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_FALSE(flags->allreduce_overlap);
  EXPECT_EQ(flags->allreduce_bucket_bytes, size_t{256} << 10);
  EXPECT_TRUE(args.empty());
}

TEST(DistributedFlagsTest, LeavesAnUnknownFlagAndItsValueInPlace) {
  std::vector<std::string> args = {"--batch_size", "64", "--strategy=ps", "--seed=1"};
  auto flags = ExtractDistributedFlags(args);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->strategy, "ps");
  EXPECT_THAT(args, ElementsAre("--batch_size", "64", "--seed=1"));
  args = {"--strategy"};
  EXPECT_EQ(ExtractDistributedFlags(args).status().message(), "--strategy needs a value");
}

TEST(DistributedFlagsTest, BadValuesNameTheFlag) {
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"--strategy=mirrored"},
                                             {"--transport=tcp"},
                                             {"--sync_replicas=maybe"},
                                             {"--connect_timeout_secs=-1"},
                                             {"--strategy"},
                                             {"--allreduce_overlap=sometimes"},
                                             {"--allreduce_bucket_kib=0"},
                                             {"--allreduce_bucket_kib=lots"}}) {
    auto flags = ExtractDistributedFlags(args);
    ASSERT_FALSE(flags.ok()) << args[0];
    EXPECT_EQ(flags.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(flags.status().message()), HasSubstr(args[0].substr(0, 8)));
  }
}

TEST(ChooseStrategyTest, DefaultsFromTheClusterShape) {
  DistributedFlags flags;
  auto local = ClusterSpec::FromTfConfig("");
  auto ps = ClusterSpec::FromTfConfig(
      R"({"cluster":{"master":["m:1"],"worker":["w:1"],"ps":["p:1"]},"task":{"type":"master"}})");
  auto workers = ClusterSpec::FromTfConfig(
      R"({"cluster":{"worker":["w:1","v:1"]},"task":{"type":"worker","index":1}})");
  ASSERT_TRUE(local.ok() && ps.ok() && workers.ok());
  EXPECT_EQ(*ChooseStrategy(*local, flags), "local");
  EXPECT_EQ(*ChooseStrategy(*ps, flags), "ps");
  EXPECT_EQ(*ChooseStrategy(*workers, flags), "allreduce");
  flags.strategy = "ps";
  EXPECT_THAT(std::string(ChooseStrategy(*workers, flags).status().message()),
              HasSubstr("no ps tasks"));
  flags.strategy = "allreduce";
  EXPECT_EQ(*ChooseStrategy(*ps, flags), "allreduce");
}

// A replica's share of a transport the test's hub owns, which the test can
// break: after FailFromSend(k), the k-th Send from then on and every later
// one fail as with a lost peer.
class BorrowedTransport : public Transport {
 public:
  explicit BorrowedTransport(Transport& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  absl::Status Send(int peer, Tag tag, absl::Span<const std::byte> data,
                    absl::Time deadline) override {
    if (fail_in_.fetch_sub(1) == 1 || broken_.load()) {
      broken_ = true;
      return absl::UnavailableError(absl::StrCat("lost peer rank ", peer));
    }
    return inner_.Send(peer, tag, data, deadline);
  }
  absl::Status RecvInto(int peer, Tag tag, size_t size, PieceConsumer consume,
                        absl::Time deadline) override {
    return inner_.RecvInto(peer, tag, size, consume, deadline);
  }
  void FailFromSend(int k) { fail_in_ = k; }

 private:
  Transport& inner_;
  std::atomic<int64_t> fail_in_{int64_t{1} << 62};
  std::atomic<bool> broken_{false};
};

// One replica: an MLP whose gradients make buckets of both all-reduce
// algorithms (ring above kExchangeAllReduceMaxBytes, exchange below) with
// the bucket size the tests use.
class Replica {
 public:
  explicit Replica(int rank)
      : rank_(rank),
        model_(*engine::BuildModel(engine::MlpSpec(1024, 8), {5}, 3)),
        device_(1),
        variables_(&device_),
        optimizer_(*engine::Optimizer::Create("adam", {}, device_)) {
    options_.seed = 5;
    ctx_ = std::make_unique<engine::TrainingContext>(options_, model_, device_, variables_,
                                                     *optimizer_);
  }

  engine::TrainingContext& ctx() { return *ctx_; }

  // A different batch per rank and step.
  runtime::data::Batch BatchFor(int step) const {
    std::mt19937 rng(static_cast<uint32_t>(1000 * step + rank_));
    std::normal_distribution<float> noise(0.0f, 1.0f);
    runtime::data::Batch batch;
    batch.size = 6;
    batch.index = step;
    for (int i = 0; i < 6; ++i) {
      const int label = static_cast<int>(rng() % 3);
      batch.labels.push_back(label);
      for (int j = 0; j < 5; ++j) batch.features.push_back(noise(rng) + (j == label ? 2.0f : 0.0f));
    }
    return batch;
  }

  // Every variable, in name order, one after another.
  std::vector<float> Flat() const {
    std::vector<float> flat;
    for (const auto& [name, t] : variables_.values()) {
      flat.insert(flat.end(), t.data(), t.data() + t.num_elements());
    }
    return flat;
  }

 private:
  int rank_;
  engine::TrainerOptions options_;
  engine::Model model_;
  engine::CpuDevice device_;
  engine::VariableStore variables_;
  std::unique_ptr<engine::Optimizer> optimizer_;
  std::unique_ptr<engine::TrainingContext> ctx_;
};

AllReduceStrategy::Options TestOptions(int n, bool overlap) {
  AllReduceStrategy::Options options;
  options.overlap = overlap;
  options.bucket_bytes = 4 << 10;
  options.step_timeout = absl::Seconds(60);
  for (int r = 0; r < n; ++r) options.replica_names.push_back(absl::StrCat("/job:worker/task:", r));
  return options;
}

struct ReplicaRun {
  std::vector<float> initial;
  std::vector<float> final;
  std::vector<float> losses;   // the step's global mean
  float first_local_loss = 0;  // this replica's own loss on its first batch
  absl::Status status;
};

// `n` replicas, a thread each, train `steps` steps over an in-process hub.
std::vector<ReplicaRun> Train(int n, bool overlap, int steps) {
  InProcessHub hub(n);
  std::vector<ReplicaRun> runs(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ReplicaRun& run = runs[r];
      Replica replica(r);
      AllReduceStrategy strategy(std::make_unique<BorrowedTransport>(hub.transport(r)),
                                 TestOptions(n, overlap));
      absl::StatusOr<int64_t> start = strategy.Initialize(replica.ctx(), nullptr);
      if (!start.ok()) {
        run.status = start.status();
        return;
      }
      run.initial = replica.Flat();
      auto local = replica.ctx().Evaluate(replica.BatchFor(0));
      if (local.ok()) run.first_local_loss = local->first;
      int64_t step = *start;
      for (int s = 0; s < steps; ++s) {
        auto result = strategy.Step(replica.ctx(), replica.BatchFor(s), step);
        if (!result.ok()) {
          run.status = result.status();
          return;
        }
        step = result->global_step;
        run.losses.push_back(result->loss);
      }
      run.final = replica.Flat();
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

// The ps tests' options: deadlines a failing test meets in seconds, not
// minutes.
ParameterServerOptions TestPsOptions(bool sync) {
  ParameterServerOptions options;
  options.sync_replicas = sync;
  options.connect_timeout = absl::Seconds(20);
  options.request_timeout = absl::Seconds(20);
  options.finish_grace = absl::Seconds(1);
  return options;
}

engine::TrainerOptions SgdOptions() {
  engine::TrainerOptions options;
  options.optimizer = "sgd";
  options.learning_rate = 0.1;
  return options;
}

// A chief whose request payload reaches the ps only after the ps's poll for
// request headers (once a second) has timed out: the ps waits for the
// payload as long as for any request instead of giving up on it, and the
// step completes. With request_timeout short, a ps that dropped the payload
// fails the chief's request in seconds instead of hanging the test.
class DelayedPayloadTransport : public Transport {
 public:
  DelayedPayloadTransport(Transport& inner, int peer, absl::Duration delay)
      : inner_(inner), peer_(peer), delay_(delay) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  absl::Status Send(int peer, Tag tag, absl::Span<const std::byte> data,
                    absl::Time deadline) override {
    bool hold_back = false;
    if (peer == peer_) {
      // Every request's header has the first tag sent; the first send with
      // another tag is the first request's payload.
      absl::MutexLock lock(&mu_);
      if (!first_tag_) first_tag_ = tag;
      hold_back = tag != *first_tag_ && !delayed_;
      if (hold_back) delayed_ = true;
    }
    if (hold_back) absl::SleepFor(delay_);
    return inner_.Send(peer, tag, data, deadline);
  }
  absl::Status RecvInto(int peer, Tag tag, size_t size, PieceConsumer consume,
                        absl::Time deadline) override {
    return inner_.RecvInto(peer, tag, size, consume, deadline);
  }
  bool delayed() const {
    absl::MutexLock lock(&mu_);
    return delayed_;
  }

 private:
  Transport& inner_;
  const int peer_;
  const absl::Duration delay_;
  mutable absl::Mutex mu_;
  std::optional<Tag> first_tag_ ABSL_GUARDED_BY(mu_);
  bool delayed_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(ParameterServerStrategyTest, APayloadArrivingAfterTheHeaderPollIsStillServed) {
  constexpr char kCluster[] = R"("cluster":{"master":["m:1"],"ps":["p:1"]})";
  auto chief =
      ClusterSpec::FromTfConfig(absl::StrCat("{", kCluster, R"(,"task":{"type":"master"}})"));
  auto ps =
      ClusterSpec::FromTfConfig(absl::StrCat("{", kCluster, R"(,"task":{"type":"ps","index":0}})"));
  ASSERT_TRUE(chief.ok() && ps.ok());
  const ParameterServerOptions ps_options = TestPsOptions(/*sync=*/true);
  const engine::TrainerOptions trainer_options = SgdOptions();

  InProcessHub hub(2);  // rank 0: the chief; rank 1: the ps
  absl::Status served;
  std::thread ps_task(
      [&] { served = ServeParametersOver(hub.transport(1), *ps, trainer_options, ps_options); });
  Replica replica(0);
  auto owned = std::make_unique<DelayedPayloadTransport>(hub.transport(0), /*peer=*/1,
                                                         absl::Milliseconds(1500));
  DelayedPayloadTransport& transport = *owned;
  std::unique_ptr<engine::TrainingStrategy> strategy =
      MakeParameterServerStrategyOver(std::move(owned), *chief, ps_options);
  absl::StatusOr<int64_t> start = strategy->Initialize(replica.ctx(), nullptr);
  absl::Status trained = start.status();
  int64_t step = start.ok() ? *start : 0;
  for (int s = 0; trained.ok() && s < 3; ++s) {
    auto result = strategy->Step(replica.ctx(), replica.BatchFor(s), step);
    trained = result.status();
    if (result.ok()) step = result->global_step;
  }
  if (trained.ok()) trained = strategy->Finish(replica.ctx());
  // A chief that failed is gone: the ps sees it lost and ends, so the test
  // fails here rather than waiting on the ps.
  if (!trained.ok()) hub.Kill(0);
  ps_task.join();
  EXPECT_TRUE(transport.delayed()) << "no payload was held back: the test tests nothing";
  EXPECT_TRUE(trained.ok()) << trained;
  EXPECT_EQ(step, 3);
  EXPECT_TRUE(served.ok()) << served;
}

// A ps outlives its workers while the chief may still need it: a chief lost
// after every worker has finished and left (before it said DONE, so before
// its final checkpoint) fails the ps retryably, naming the chief, instead of
// ending it as a job that finished; the ps then runs again for the
// chief's next run.
TEST(ParameterServerStrategyTest, AChiefLostAfterTheWorkersLeftFailsThePs) {
  constexpr char kCluster[] = R"("cluster":{"master":["m:1"],"worker":["w:1"],"ps":["p:1"]})";
  auto spec = [&](const char* task) {
    return ClusterSpec::FromTfConfig(absl::StrCat("{", kCluster, R"(,"task":)", task, "}"));
  };
  auto chief = spec(R"({"type":"master"})");
  auto worker = spec(R"({"type":"worker","index":0})");
  auto ps = spec(R"({"type":"ps","index":0})");
  ASSERT_TRUE(chief.ok() && worker.ok() && ps.ok());
  for (bool sync : {false, true}) {
    SCOPED_TRACE(sync ? "sync" : "async");
    const ParameterServerOptions ps_options = TestPsOptions(sync);
    const engine::TrainerOptions trainer_options = SgdOptions();

    InProcessHub hub(3);  // ranks: the chief, the worker, the ps
    absl::Status served;
    std::atomic<bool> ps_returned{false};
    std::thread ps_task([&] {
      served = ServeParametersOver(hub.transport(2), *ps, trainer_options, ps_options);
      ps_returned = true;
    });
    // Both replicas train 3 steps; the worker says goodbye, the chief is
    // lost before its end.
    absl::Status replica_status[2];
    std::vector<std::thread> replicas;
    for (int rank : {0, 1}) {
      replicas.emplace_back([&, rank] {
        Replica replica(rank);
        std::unique_ptr<engine::TrainingStrategy> strategy = MakeParameterServerStrategyOver(
            std::make_unique<BorrowedTransport>(hub.transport(rank)), rank == 0 ? *chief : *worker,
            ps_options);
        absl::StatusOr<int64_t> start = strategy->Initialize(replica.ctx(), nullptr);
        absl::Status status = start.status();
        int64_t step = start.ok() ? *start : 0;
        for (int s = 0; status.ok() && s < 3; ++s) {
          auto result = strategy->Step(replica.ctx(), replica.BatchFor(s), step);
          status = result.status();
          if (result.ok()) step = result->global_step;
        }
        if (status.ok() && rank == 1) status = strategy->Finish(replica.ctx());
        replica_status[rank] = status;
      });
    }
    for (std::thread& t : replicas) t.join();
    ASSERT_TRUE(replica_status[0].ok()) << replica_status[0];
    ASSERT_TRUE(replica_status[1].ok()) << replica_status[1];
    // The ps waits for the chief as long as the chief is there.
    absl::SleepFor(absl::Milliseconds(1500));
    EXPECT_FALSE(ps_returned) << "the ps ended with the chief still there: " << served;
    hub.Kill(0);
    ps_task.join();
    EXPECT_EQ(served.code(), absl::StatusCode::kUnavailable) << served;
    EXPECT_THAT(std::string(served.message()), HasSubstr("lost /job:master/task:0")) << served;
  }
}

TEST(AllReduceStrategyTest, OverlappedAndSequentialStepsGiveBitIdenticalVariables) {
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat(n, " replicas"));
    std::vector<ReplicaRun> overlapped = Train(n, /*overlap=*/true, 4);
    std::vector<ReplicaRun> sequential = Train(n, /*overlap=*/false, 4);
    float mean_local_loss = 0;
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(overlapped[r].status.ok()) << overlapped[r].status;
      ASSERT_TRUE(sequential[r].status.ok()) << sequential[r].status;
      ASSERT_EQ(overlapped[r].final.size(), sequential[r].final.size());
      // Bit for bit, and the same on every replica.
      EXPECT_EQ(std::memcmp(overlapped[r].final.data(), sequential[r].final.data(),
                            overlapped[r].final.size() * sizeof(float)),
                0)
          << "rank " << r;
      EXPECT_EQ(std::memcmp(overlapped[r].final.data(), overlapped[0].final.data(),
                            overlapped[r].final.size() * sizeof(float)),
                0)
          << "rank " << r;
      EXPECT_EQ(overlapped[r].losses, sequential[r].losses) << "rank " << r;
      EXPECT_EQ(overlapped[r].losses, overlapped[0].losses) << "rank " << r;
      EXPECT_NE(overlapped[r].final, overlapped[r].initial) << "rank " << r << " did not train";
      mean_local_loss += overlapped[r].first_local_loss / static_cast<float>(n);
    }
    // The first step's loss is the mean of the replicas' own.
    EXPECT_NEAR(overlapped[0].losses[0], mean_local_loss, 1e-5f * mean_local_loss);
  }
}

TEST(AllReduceStrategyTest, LostPeerDuringOverlappedBackwardFailsTheStepRetryably) {
  InProcessHub hub(3);
  absl::Notification rank2_dead;
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Replica replica(r);
      AllReduceStrategy strategy(std::make_unique<BorrowedTransport>(hub.transport(r)),
                                 TestOptions(3, /*overlap=*/true));
      absl::StatusOr<int64_t> start = strategy.Initialize(replica.ctx(), nullptr);
      if (r == 2) {
        // Rank 2 has received the variables (nothing more is sent to it in
        // Initialize) and dies.
        status[r] = start.status();
        hub.Kill(2);
        rank2_dead.Notify();
        return;
      }
      rank2_dead.WaitForNotification();
      status[r] = start.ok() ? strategy.Step(replica.ctx(), replica.BatchFor(0), *start).status()
                             : start.status();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(status[2].ok()) << status[2];
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(status[r].ok()) << "rank " << r;
    EXPECT_EQ(status[r].code(), absl::StatusCode::kUnavailable) << status[r];
    EXPECT_EQ(runtime::ExitCodeFor(status[r]), runtime::kExitRetryable) << status[r];
    EXPECT_THAT(
        std::string(status[r].message()),
        ::testing::AllOf(HasSubstr(absl::StrCat("replica ", r, ": gradient all-reduce at step 0")),
                         HasSubstr("lost peer rank 2"), HasSubstr("/job:worker/task:2")));
  }
}

TEST(AllReduceStrategyTest, SendFailingAfterSomeBucketsFailsEveryReplicasStep) {
  // Two good steps, then rank 0's transport fails from its 5th send of the
  // third step: its first bucket goes through (on the communication thread),
  // a later one fails. A replica whose step failed exits (Kill), so its
  // peers learn it is gone instead of waiting out their deadline.
  InProcessHub hub(3);
  std::vector<absl::Status> status(3);
  std::vector<int> good_steps(3, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Replica replica(r);
      auto owned = std::make_unique<BorrowedTransport>(hub.transport(r));
      BorrowedTransport& transport = *owned;
      AllReduceStrategy strategy(std::move(owned), TestOptions(3, /*overlap=*/true));
      absl::StatusOr<int64_t> step = strategy.Initialize(replica.ctx(), nullptr);
      for (int s = 0; step.ok(); ++s) {
        if (s == 2 && r == 0) transport.FailFromSend(5);
        absl::StatusOr<AllReduceStrategy::StepResult> result =
            strategy.Step(replica.ctx(), replica.BatchFor(s), *step);
        if (!result.ok()) {
          step = result.status();
          break;
        }
        step = result->global_step;
        ++good_steps[r];
      }
      status[r] = step.status();
      hub.Kill(r);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(good_steps[r], 2) << "rank " << r;
    ASSERT_FALSE(status[r].ok()) << "rank " << r;
    EXPECT_EQ(runtime::ExitCodeFor(status[r]), runtime::kExitRetryable) << status[r];
    EXPECT_THAT(std::string(status[r].message()),
                HasSubstr(absl::StrCat("replica ", r, ": gradient all-reduce at step 2")));
  }
  EXPECT_THAT(std::string(status[0].message()), HasSubstr("lost peer rank 1"));
}

}  // namespace
}  // namespace kubetrain::dist
