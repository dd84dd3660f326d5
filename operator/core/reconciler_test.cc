#include "operator/core/reconciler.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/core/gang_admission.h"
#include "operator/core/kube_objects.h"

namespace kubetrain::core {
namespace {

using api::Role;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::IsEmpty;
using testing::Pair;
using testing::UnorderedElementsAre;
using testing::UnorderedElementsAreArray;

// ---- Fakes -----------------------------------------------------------------

// Suggests {"x": "<n>"} for n = 1, 2, ... up to `capacity` points.
class FakeTuner : public tuner::Tuner {
 public:
  FakeTuner(int capacity, std::vector<std::pair<size_t, int>>* calls,
            std::vector<tuner::TrialRecord>* last_history = nullptr)
      : capacity_(capacity), calls_(calls), last_history_(last_history) {}
  std::vector<tuner::Assignment> Suggest(const std::vector<tuner::TrialRecord>& history,
                                         int count) override {
    calls_->emplace_back(history.size(), count);
    if (last_history_ != nullptr) *last_history_ = history;
    std::vector<tuner::Assignment> out;
    for (int i = 0; i < count; ++i) {
      const int n = static_cast<int>(history.size()) + i + 1;
      if (n > capacity_) break;
      out.push_back({{"x", std::to_string(n)}});
    }
    return out;
  }

 private:
  int capacity_;
  std::vector<std::pair<size_t, int>>* calls_;
  std::vector<tuner::TrialRecord>* last_history_;
};

constexpr absl::Duration kGrace = absl::Seconds(30);

// A job, the cluster it runs on, and a clock. Apply() carries out a result
// the way a backend would: creates appear Pending, deletes remove the object
// (or, with `slow_deletes`, mark it terminating for the grace period).
struct Harness {
  v1::TrainingJob job;
  Observed observed;
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  ReconcileOptions options;
  int tuner_capacity = 1000;
  std::vector<std::pair<size_t, int>> suggest_calls;
  std::vector<tuner::TrialRecord> last_history;  // what the tuner saw last
  std::vector<uint64_t> seeds;
  std::set<std::string> stop_trials;  // the fake stop rule stops these
  bool slow_deletes = false;

  explicit Harness(v1::TrainingJob j) : job(std::move(j)) {
    options.address = KubernetesAddresses("default");
    options.tuner_factory = [this](const v1::HyperparameterSpec&,
                                   uint64_t seed) -> absl::StatusOr<std::unique_ptr<tuner::Tuner>> {
      seeds.push_back(seed);
      return std::make_unique<FakeTuner>(tuner_capacity, &suggest_calls, &last_history);
    };
    options.stop_rule = [this](const v1::HyperparameterSpec&, const tuner::TrialRecord& running,
                               const std::vector<tuner::TrialRecord>&) {
      return stop_trials.count(running.trial_id) > 0;
    };
  }

  ReconcileResult Reconcile() {
    ReconcileResult r = core::Reconcile(job, observed, now, options);
    *job.mutable_status() = r.status;
    return r;
  }

  void Apply(const ReconcileResult& r) {
    for (const Action& a : r.actions) {
      if (auto* c = std::get_if<CreateReplica>(&a)) {
        ASSERT_EQ(Find(c->replica.name), nullptr) << "created twice: " << c->replica.name;
        ObservedReplica o;
        o.name = c->replica.name;
        o.key = c->replica.key;
        o.created = now;
        observed.replicas.push_back(o);
      } else if (auto* s = std::get_if<CreateService>(&a)) {
        for (const ObservedService& existing : observed.services) {
          ASSERT_NE(existing.name, s->replica.name) << "service created twice";
        }
        observed.services.push_back({s->replica.name, s->replica.key});
      } else if (auto* d = std::get_if<DeleteReplica>(&a)) {
        ObservedReplica* o = Find(d->name);
        ASSERT_NE(o, nullptr) << "deleted what is not there: " << d->name;
        if (slow_deletes && !d->force) {
          o->deletion_requested = true;
          o->deletion_time = now + kGrace;
        } else {
          std::erase_if(observed.replicas, [&](const auto& x) { return x.name == d->name; });
        }
      } else if (auto* ds = std::get_if<DeleteService>(&a)) {
        const size_t n =
            std::erase_if(observed.services, [&](const auto& x) { return x.name == ds->name; });
        ASSERT_EQ(n, 1u) << "deleted a service that is not there: " << ds->name;
      } else if (auto* ar = std::get_if<ArchiveTrial>(&a)) {
        Archive(ar->trial);
      } else if (auto* cc = std::get_if<CreateClaim>(&a)) {
        ASSERT_THAT(observed.claims, testing::Not(testing::Contains(cc->name)))
            << "claim created twice";
        observed.claims.push_back(cc->name);
      } else if (auto* dc = std::get_if<DeleteClaim>(&a)) {
        ASSERT_EQ(std::erase(observed.claims, dc->name), 1u) << "deleted a claim not there";
      }
    }
  }

  // As both job stores keep archives: by trial id, a second write replacing
  // the first.
  void Archive(const v1::HyperparameterOutput& trial) {
    std::erase_if(observed.archived_trials,
                  [&](const auto& t) { return t.trial_id() == trial.trial_id(); });
    observed.archived_trials.push_back(trial);
  }

  ReconcileResult Step() {
    ReconcileResult r = Reconcile();
    Apply(r);
    return r;
  }

  // Steps until a reconcile changes nothing, then checks that one more does
  // nothing either (sample-controller's TestDoNothing).
  void Settle() {
    for (int i = 0; i < 6; ++i) {
      ReconcileResult r = Step();
      if (r.actions.empty() && !r.status_changed) return;
    }
    ADD_FAILURE() << "did not settle";
  }

  ObservedReplica* Find(const std::string& name) {
    for (ObservedReplica& o : observed.replicas) {
      if (o.name == name) return &o;
    }
    return nullptr;
  }
  ObservedReplica& Pod(const std::string& name) {
    ObservedReplica* o = Find(name);
    if (o == nullptr) {
      ADD_FAILURE() << "no replica " << name;
      static ObservedReplica none;
      return none;
    }
    return *o;
  }
  void RunAll() {
    for (ObservedReplica& o : observed.replicas) {
      if (o.phase == ReplicaPhase::kPending) {
        o.phase = ReplicaPhase::kRunning;
        o.run_since = now;
      }
    }
  }
  // The replica's node went: it is recreated now, and no node takes it.
  void Unplaceable(const std::string& name,
                   const std::string& message = "0/3 nodes are available: 3 Insufficient cpu.") {
    ObservedReplica& o = Pod(name);
    o.phase = ReplicaPhase::kPending;
    o.created = now;
    o.waiting = ReplicaWaiting{.reason = "Unschedulable", .message = message};
  }
  void Exit(const std::string& name, int code, const std::string& message = "") {
    ObservedReplica& o = Pod(name);
    o.phase = code == 0 ? ReplicaPhase::kSucceeded : ReplicaPhase::kFailed;
    o.exit_code = code;
    o.termination_message = message;
    o.finished = now;
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const ObservedReplica& o : observed.replicas) names.push_back(o.name);
    return names;
  }
  const v1::Condition* Condition(const std::string& type) const {
    for (const v1::Condition& c : job.status().conditions()) {
      if (c.type() == type) return &c;
    }
    return nullptr;
  }
  bool ConditionTrue(const std::string& type) const {
    const v1::Condition* c = Condition(type);
    return c != nullptr && c->status() == "True";
  }
};

std::vector<std::string> Created(const ReconcileResult& r) {
  std::vector<std::string> names;
  for (const Action& a : r.actions) {
    if (auto* c = std::get_if<CreateReplica>(&a)) names.push_back(c->replica.name);
  }
  return names;
}
std::vector<std::string> Deleted(const ReconcileResult& r) {
  std::vector<std::string> names;
  for (const Action& a : r.actions) {
    if (auto* d = std::get_if<DeleteReplica>(&a)) names.push_back(d->name);
  }
  return names;
}
std::vector<std::string> ServicesCreated(const ReconcileResult& r) {
  std::vector<std::string> names;
  for (const Action& a : r.actions) {
    if (auto* c = std::get_if<CreateService>(&a)) names.push_back(c->replica.name);
  }
  return names;
}
std::vector<std::string> ServicesDeleted(const ReconcileResult& r) {
  std::vector<std::string> names;
  for (const Action& a : r.actions) {
    if (auto* d = std::get_if<DeleteService>(&a)) names.push_back(d->name);
  }
  return names;
}
std::vector<std::string> ClaimActions(const ReconcileResult& r) {
  std::vector<std::string> out;
  for (const Action& a : r.actions) {
    if (auto* c = std::get_if<CreateClaim>(&a)) out.push_back("create " + c->name);
    if (auto* d = std::get_if<DeleteClaim>(&a)) out.push_back("delete " + d->name);
  }
  return out;
}
std::vector<std::string> EventReasons(const ReconcileResult& r) {
  std::vector<std::string> reasons;
  for (const Action& a : r.actions) {
    if (auto* e = std::get_if<EmitEvent>(&a)) reasons.push_back(e->reason);
  }
  return reasons;
}
// "Type Reason: message" of each event.
std::vector<std::string> Events(const ReconcileResult& r) {
  std::vector<std::string> events;
  for (const Action& a : r.actions) {
    if (auto* e = std::get_if<EmitEvent>(&a)) {
      events.push_back(absl::StrCat(e->type == EmitEvent::Type::kWarning ? "Warning" : "Normal",
                                    " ", e->reason, ": ", e->message));
    }
  }
  return events;
}
const CreateReplica* CreateOf(const ReconcileResult& r, const std::string& name) {
  for (const Action& a : r.actions) {
    if (auto* c = std::get_if<CreateReplica>(&a); c && c->replica.name == name) return c;
  }
  return nullptr;
}

// master + `workers` workers + `ps` parameter servers.
v1::TrainingJob Job(int workers = 2, int ps = 1) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("mnist");
  job.mutable_metadata()->set_namespace_("default");
  job.mutable_metadata()->set_uid("uid-1");
  job.mutable_metadata()->set_generation(1);
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_scale_tier(v1::TrainingInput::CUSTOM);
  input->set_master_type("standard");
  if (workers > 0) {
    input->set_worker_type("standard");
    input->set_worker_count(workers);
  }
  if (ps > 0) {
    input->set_parameter_server_type("standard");
    input->set_parameter_server_count(ps);
  }
  return job;
}

// A started job: all replicas exist and run.
Harness Running(v1::TrainingJob job) {
  Harness h(std::move(job));
  h.Settle();
  h.RunAll();
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  return h;
}

// ---- A plain job -----------------------------------------------------------

TEST(ReconcileTest, Standard1LifecycleWithDoNothingAtEveryStep) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_training_input()->clear_master_type();
  job.mutable_spec()->mutable_training_input()->clear_worker_type();
  job.mutable_spec()->mutable_training_input()->clear_worker_count();
  job.mutable_spec()->mutable_training_input()->clear_parameter_server_type();
  job.mutable_spec()->mutable_training_input()->clear_parameter_server_count();
  job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::STANDARD_1);
  Harness h(job);

  // 1. Recorded as QUEUED; 8 replicas and 8 Services asked for.
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::QUEUED);
  EXPECT_TRUE(r.status_changed);
  EXPECT_TRUE(r.status.has_create_time());
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-master-0", "mnist-worker-0", "mnist-worker-1",
                                               "mnist-worker-2", "mnist-worker-3", "mnist-ps-0",
                                               "mnist-ps-1", "mnist-ps-2"));
  EXPECT_THAT(ServicesCreated(r), UnorderedElementsAreArray(Created(r)));

  // 2. Seen to exist: PREPARING, nothing more to do.
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::PREPARING);
  EXPECT_THAT(Created(r), IsEmpty());
  EXPECT_TRUE(h.ConditionTrue("Created"));
  EXPECT_THAT(EventReasons(r), ElementsAre("ReplicasCreated"));
  r = h.Step();
  EXPECT_TRUE(r.actions.empty());
  EXPECT_FALSE(r.status_changed);

  // 3. All running: RUNNING with a start time.
  h.RunAll();
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::RUNNING);
  EXPECT_TRUE(r.status.has_start_time());
  EXPECT_TRUE(h.ConditionTrue("Running"));
  EXPECT_EQ(r.status.replica_statuses().at("worker").active(), 4);
  r = h.Step();
  EXPECT_TRUE(r.actions.empty());
  EXPECT_FALSE(r.status_changed);

  // 4. A worker finishing does not end the job; the master does.
  h.Exit("mnist-worker-3", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  h.Exit("mnist-master-0", 0);
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::SUCCEEDED);
  EXPECT_TRUE(r.status.has_end_time());
  EXPECT_TRUE(h.ConditionTrue("Succeeded"));
  EXPECT_FALSE(h.ConditionTrue("Running"));
  EXPECT_EQ(h.Condition("Succeeded")->message(), "master-0 succeeded");
  // cleanPodPolicy Running (the default): ps and running workers go, with
  // their Services; completed replicas stay.
  EXPECT_THAT(Deleted(r), UnorderedElementsAre("mnist-worker-0", "mnist-worker-1", "mnist-worker-2",
                                               "mnist-ps-0", "mnist-ps-1", "mnist-ps-2"));
  EXPECT_THAT(ServicesDeleted(r), UnorderedElementsAreArray(Deleted(r)));
  EXPECT_THAT(h.Names(), UnorderedElementsAre("mnist-master-0", "mnist-worker-3"));
  r = h.Step();
  EXPECT_TRUE(r.actions.empty());
  EXPECT_FALSE(r.status_changed);
  EXPECT_FALSE(r.requeue_after.has_value());
}

TEST(ReconcileTest, ReplicaCarriesEnvArgsAndResources) {
  v1::TrainingJob job = Job(1, 0);
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->add_args("--epochs=3");
  input->set_job_dir("/out");
  input->mutable_worker_config()->set_image_uri("example/trainer:1");
  input->mutable_worker_config()->mutable_accelerator_config()->set_count(2);
  input->mutable_worker_config()->mutable_accelerator_config()->set_type(
      v1::AcceleratorConfig::NVIDIA_TESLA_T4);
  Harness h(job);
  h.options.metrics_address = "operator:9090";
  h.options.trial_token = [](const std::string& uid, const std::string& trial) {
    return uid + "/" + trial;
  };
  ReconcileResult r = h.Reconcile();
  const CreateReplica* worker = CreateOf(r, "mnist-worker-0");
  ASSERT_NE(worker, nullptr);
  const DesiredReplica& w = worker->replica;
  EXPECT_EQ(w.image, "example/trainer:1");
  EXPECT_EQ(w.image_pull_policy, "");  // Kubernetes' default for the tag
  const CreateReplica* master = CreateOf(r, "mnist-master-0");
  ASSERT_NE(master, nullptr);
  EXPECT_EQ(master->replica.image, std::string(kDefaultRuntimeImage));
  EXPECT_EQ(master->replica.image_pull_policy, "IfNotPresent");
  // The worker's own image runs its entrypoint with the args; the master,
  // in kubetrain's image, the built-in trainer.
  EXPECT_THAT(w.command, IsEmpty());
  EXPECT_THAT(master->replica.command, ElementsAre("kubetrain-runtime", "train"));
  EXPECT_THAT(w.args, ElementsAre("--epochs=3", "--job-dir", "/out"));
  EXPECT_EQ(w.resources.gpus, 2);
  EXPECT_EQ(w.resources.accelerator_type, "NVIDIA_TESLA_T4");
  EXPECT_EQ(w.resources.cpu, 4);
  EXPECT_EQ(w.Env("CLOUD_ML_JOB_ID"), "mnist");
  EXPECT_EQ(w.Env("CLOUD_ML_TRIAL_ID"), "");
  EXPECT_EQ(w.Env("KUBETRAIN_TASK_TYPE"), "worker");
  EXPECT_EQ(w.Env("KUBETRAIN_TASK_INDEX"), "0");
  // Not a tuning trial: nothing to report, so no Metrics address or token.
  EXPECT_EQ(w.Env("KUBETRAIN_METRICS_ADDR"), "");
  EXPECT_EQ(w.Env("KUBETRAIN_METRICS_TOKEN"), "");
  EXPECT_THAT(w.Env("TF_CONFIG"), HasSubstr(R"("task":{"type":"worker","index":0})"));
  EXPECT_EQ(w.env[0].first, "TF_CONFIG");
  EXPECT_EQ(w.labels.at("kubetrain.io/replica-type"), "worker");
}

TEST(ReconcileTest, LocalBackendGetsNoServices) {
  Harness h(Job());
  h.options.services = false;
  ReconcileResult r = h.Step();
  EXPECT_EQ(Created(r).size(), 4u);
  EXPECT_THAT(ServicesCreated(r), IsEmpty());
  h.Settle();
}

// Each restart policy against each kind of failure.
TEST(ReconcileTest, RestartPolicies) {
  enum class Failure { kExit1, kExit137, kEvicted, kNodeLost, kUnknownPhase };
  struct Case {
    v1::RunPolicy::RestartPolicy policy;
    Failure failure;
    bool restarts;
    std::string message;  // the job's error when it does not restart
  };
  const Case cases[] = {
      {v1::RunPolicy::Never, Failure::kExit1, false, "worker-1 exited with code 1: boom"},
      {v1::RunPolicy::Never, Failure::kExit137, false, "worker-1 exited with code 137: boom"},
      {v1::RunPolicy::Never, Failure::kNodeLost, false,
       "worker-1 was lost: its node is unreachable"},
      {v1::RunPolicy::OnFailure, Failure::kExit1, true, ""},
      {v1::RunPolicy::OnFailure, Failure::kEvicted, true, ""},
      {v1::RunPolicy::Always, Failure::kExit1, true, ""},
      {v1::RunPolicy::ExitCode, Failure::kExit1, false, "worker-1 exited with code 1: boom"},
      {v1::RunPolicy::ExitCode, Failure::kExit137, true, ""},
      {v1::RunPolicy::ExitCode, Failure::kEvicted, true, ""},
      {v1::RunPolicy::ExitCode, Failure::kNodeLost, true, ""},
      {v1::RunPolicy::ExitCode, Failure::kUnknownPhase, true, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(v1::RunPolicy::RestartPolicy_Name(c.policy) + " " +
                 std::to_string(static_cast<int>(c.failure)));
    v1::TrainingJob job = Job();
    job.mutable_spec()->mutable_run_policy()->set_restart_policy(c.policy);
    Harness h = Running(job);
    ObservedReplica& w = h.Pod("mnist-worker-1");
    const bool lost = c.failure == Failure::kNodeLost || c.failure == Failure::kUnknownPhase;
    switch (c.failure) {
      case Failure::kExit1:
        h.Exit("mnist-worker-1", 1, "boom");
        break;
      case Failure::kExit137:
        h.Exit("mnist-worker-1", 137, "boom");
        break;
      case Failure::kEvicted:
        w.phase = ReplicaPhase::kFailed;
        w.reason = "Evicted";
        break;
      case Failure::kNodeLost:
        w.node_lost = true;
        break;
      case Failure::kUnknownPhase:
        w.phase = ReplicaPhase::kUnknown;
        break;
    }
    ReconcileResult r = h.Reconcile();
    if (!c.restarts) {
      EXPECT_EQ(r.status.state(), v1::FAILED);
      EXPECT_EQ(r.status.error_message(), c.message);
      EXPECT_EQ(h.Condition("Failed")->reason(), "ReplicaFailed");
      EXPECT_EQ(h.Condition("Failed")->message(), c.message);
      EXPECT_THAT(EventReasons(r), ElementsAre("ReplicaFailed"));
      // Running replicas stop (cleanPodPolicy Running); the failed one stays
      // for its logs unless it is lost.
      std::vector<std::string> want = {"mnist-master-0", "mnist-worker-0", "mnist-ps-0"};
      if (lost) want.push_back("mnist-worker-1");
      EXPECT_THAT(Deleted(r), UnorderedElementsAreArray(want));
      h.Apply(r);
      r = h.Step();
      EXPECT_TRUE(r.actions.empty());
      EXPECT_FALSE(r.status_changed);
      continue;
    }
    EXPECT_EQ(r.status.state(), v1::RUNNING);
    EXPECT_EQ(r.status.restart_count(), 1);
    ASSERT_THAT(Deleted(r), ElementsAre("mnist-worker-1"));
    EXPECT_EQ(
        std::get<DeleteReplica>(
            r.actions[std::distance(r.actions.begin(),
                                    std::find_if(r.actions.begin(), r.actions.end(),
                                                 [](const Action& a) {
                                                   return std::holds_alternative<DeleteReplica>(a);
                                                 }))])
            .force,
        lost);
    EXPECT_THAT(EventReasons(r), ElementsAre("Restarting"));
    EXPECT_TRUE(h.ConditionTrue("Restarting"));
    EXPECT_FALSE(h.ConditionTrue("Running"));
    h.Apply(r);
    // Recreated after the backoff (10 s for the first restart), not before.
    r = h.Step();
    EXPECT_THAT(Created(r), IsEmpty());
    ASSERT_TRUE(r.requeue_after.has_value());
    EXPECT_EQ(*r.requeue_after, absl::Seconds(10));
    h.now += absl::Seconds(10);
    r = h.Step();
    EXPECT_THAT(Created(r), ElementsAre("mnist-worker-1"));
    EXPECT_THAT(ServicesCreated(r), IsEmpty());  // the Service stayed
    h.Settle();
    h.RunAll();
    h.Settle();
    EXPECT_EQ(h.job.status().state(), v1::RUNNING);
    EXPECT_EQ(h.job.status().restart_count(), 1);
    EXPECT_TRUE(h.ConditionTrue("Running"));
    EXPECT_FALSE(h.ConditionTrue("Restarting"));
  }
}

TEST(ReconcileTest, BackoffLimitCountsRecreationsAndContainerRestarts) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(3);
  Harness h = Running(job);

  // The kubelet restarts worker-0 in place twice: counted.
  h.Pod("mnist-worker-0").container_restarts = 2;
  h.Pod("mnist-worker-0").exit_code = 1;
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.restart_count(), 2);
  EXPECT_THAT(EventReasons(r), ElementsAre("Restarting"));
  h.Settle();

  // worker-1 is evicted: recreated, counted (3 of 3).
  h.Pod("mnist-worker-1").phase = ReplicaPhase::kFailed;
  h.Pod("mnist-worker-1").reason = "Evicted";
  r = h.Step();
  EXPECT_EQ(r.status.restart_count(), 3);
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-worker-1"));
  // The backoff doubles with each restart: 10 s * 2^(3-1).
  r = h.Step();
  EXPECT_EQ(r.requeue_after, absl::Seconds(40));
  h.now += absl::Seconds(40);
  h.Settle();
  h.RunAll();
  h.Settle();

  // Recreation reset worker-1's container restarts; nothing was lost from
  // the count. One more failure is past the limit.
  EXPECT_EQ(h.job.status().restart_count(), 3);
  h.Exit("mnist-ps-0", 1, "oops");
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(h.Condition("Failed")->reason(), "BackoffLimitExceeded");
  EXPECT_EQ(r.status.error_message(),
            "backoffLimit 3 reached (3 restarts): ps-0 exited with code 1: oops");
  h.Settle();
}

// ---- An elastic group (spec.elasticPolicy) ---------------------------------

// A PYTORCH master + 3 workers, elastic with at least `min` nodes.
v1::TrainingJob ElasticJob(int min, v1::RunPolicy::RestartPolicy policy, int backoff_limit) {
  v1::TrainingJob job = Job(3, 0);
  job.mutable_spec()->mutable_training_input()->set_framework(v1::TrainingInput::PYTORCH);
  for (v1::ReplicaConfig* config :
       {job.mutable_spec()->mutable_training_input()->mutable_master_config(),
        job.mutable_spec()->mutable_training_input()->mutable_worker_config()}) {
    config->add_container_command("torchrun");
    config->add_container_command("train.py");
  }
  job.mutable_spec()->mutable_elastic_policy()->set_min_replicas(min);
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(policy);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(backoff_limit);
  return job;
}

// A lost worker is recreated within the budget, the job running on meanwhile;
// with the budget spent, it is left out while minReplicas nodes remain.
TEST(ElasticTest, ALostWorkerIsRecreatedThenLeftOutWhileMinReplicasRemain) {
  Harness h = Running(ElasticJob(2, v1::RunPolicy::OnFailure, 1));
  h.Exit("mnist-worker-2", 137);
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::RUNNING);
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-worker-2"));
  EXPECT_THAT(Events(r), ElementsAre("Warning Restarting: worker-2 exited with code 137; "
                                     "restarting (restart 1 of 1); meanwhile the elastic group "
                                     "goes on with 3 of 4 nodes (elasticPolicy.minReplicas 2)"));
  // The group trains on: the job is running, not waiting for the node.
  EXPECT_TRUE(h.ConditionTrue("Running"));
  EXPECT_TRUE(h.ConditionTrue("Restarting"));
  h.now += absl::Seconds(10);
  r = h.Step();
  EXPECT_THAT(Created(r), ElementsAre("mnist-worker-2"));
  h.Settle();
  h.RunAll();
  h.Settle();
  EXPECT_FALSE(h.ConditionTrue("Restarting"));

  // Budget spent: worker-0, then worker-1 go; 2 nodes stay, the job runs.
  h.Exit("mnist-worker-0", 1, "rendezvous closed");
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::RUNNING);
  EXPECT_THAT(Deleted(r), IsEmpty());
  EXPECT_THAT(Created(r), IsEmpty());
  EXPECT_THAT(Events(r), ElementsAre("Warning ElasticNodeLost: worker-0 exited with code 1: "
                                     "rendezvous closed; backoffLimit 1 reached: not recreated; "
                                     "the elastic group goes on with 3 of 4 nodes "
                                     "(elasticPolicy.minReplicas 2)"));
  h.Settle();  // said once
  h.Exit("mnist-worker-1", 137);
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::RUNNING);
  EXPECT_THAT(EventReasons(r), ElementsAre("ElasticNodeLost"));
  EXPECT_THAT(h.Condition("Running")->message(), HasSubstr("goes on with 2 of 4 nodes"));
  h.Settle();

  // A third: fewer than minReplicas are left, and the job fails.
  h.Exit("mnist-worker-2", 137);
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(r.status.error_message(),
            "worker-2 exited with code 137; backoffLimit 1 reached; the elastic group has 1 of 4 "
            "nodes left, fewer than elasticPolicy.minReplicas 2");
}

// A worker being recreated counts as coming back: with the budget for one
// more restart, two workers fail at once under minReplicas 3 of 4, one is
// recreated and one left out, and the group can reach 3 again.
TEST(ElasticTest, AWorkerBeingRecreatedCountsTowardsMinReplicas) {
  Harness h = Running(ElasticJob(3, v1::RunPolicy::OnFailure, 1));
  h.Exit("mnist-worker-0", 137);
  h.Exit("mnist-worker-1", 137);
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::RUNNING) << r.status.error_message();
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-worker-0"));
  EXPECT_THAT(EventReasons(r), ElementsAre("Restarting", "ElasticNodeLost"));
}

// Restart policy Never: a lost worker is not recreated, and does not fail
// the job while minReplicas remain. The master is not a worker like the
// others: its torchrun hosts the c10d store, and it follows the job's rules.
TEST(ElasticTest, NeverRecreatesNothingAndTheMasterFollowsTheJobsRules) {
  Harness h = Running(ElasticJob(3, v1::RunPolicy::Never, 3));
  h.Exit("mnist-worker-1", 1, "boom");
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::RUNNING);
  EXPECT_THAT(Events(r), ElementsAre("Warning ElasticNodeLost: worker-1 exited with code 1: boom; "
                                     "restartPolicy Never: not recreated; the elastic group goes "
                                     "on with 3 of 4 nodes (elasticPolicy.minReplicas 3)"));
  h.Settle();
  h.Exit("mnist-master-0", 1, "store gone");
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(r.status.error_message(), "master-0 exited with code 1: store gone");

  // And the group's end is the master's, as for any job.
  Harness done = Running(ElasticJob(2, v1::RunPolicy::Never, 3));
  done.Exit("mnist-worker-0", 137);
  done.Settle();
  done.Exit("mnist-master-0", 0);
  done.Exit("mnist-worker-1", 0);
  r = done.Step();
  EXPECT_EQ(r.status.state(), v1::SUCCEEDED);
}

// Without elasticPolicy nothing changes: a lost worker fails a Never job.
TEST(ElasticTest, AFixedGroupStillFailsOnALostWorker) {
  v1::TrainingJob job = ElasticJob(2, v1::RunPolicy::Never, 3);
  job.mutable_spec()->clear_elastic_policy();
  Harness h = Running(job);
  h.Exit("mnist-worker-1", 1, "boom");
  EXPECT_EQ(h.Step().status.state(), v1::FAILED);
}

TEST(ReconcileTest, ContainerRestartsBeyondTheLimitFailTheJob) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(1);
  Harness h = Running(job);
  h.Pod("mnist-worker-0").container_restarts = 1;
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  // Crash-looping in place: the kubelet restarted it again, and it failed.
  h.Pod("mnist-worker-0").container_restarts = 2;
  h.Exit("mnist-worker-0", 2, "crash");
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("backoffLimit 1 reached (2 restarts)"));
}

TEST(ReconcileTest, CrashLoopInPlacePastTheLimitFailsTheJob) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(2);
  Harness h = Running(job);
  ObservedReplica& w = h.Pod("mnist-worker-1");
  w.container_restarts = 2;  // the kubelet restarted it twice; it runs again
  w.exit_code = 1;
  w.termination_message = "segfault";
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);  // 2 of 2: still within the limit
  h.Pod("mnist-worker-1").container_restarts = 3;
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(r.status.error_message(),
            "backoffLimit 2 exceeded (3 restarts): worker-1 restarted in place 3 times, last "
            "exit code 1: segfault");
  h.Settle();
}

TEST(ReconcileTest, CrashLoopBlamesTheReplicaRestartedMostOften) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(2);
  Harness h = Running(job);
  ObservedReplica& first = h.Pod("mnist-worker-0");
  first.container_restarts = 1;
  first.exit_code = 1;
  first.termination_message = "crashed";
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  ObservedReplica& looping = h.Pod("mnist-worker-1");
  looping.container_restarts = 2;
  looping.exit_code = 3;
  looping.termination_message = "bad shard";
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(r.status.error_message(),
            "backoffLimit 2 exceeded (3 restarts): worker-1 restarted in place 2 times, last "
            "exit code 3: bad shard");
  h.Settle();
}

TEST(ReconcileTest, InPlaceRestartsCountEvenWhenAnotherPodOfTheRoleGoesAway) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(5);
  Harness h = Running(job);
  h.Pod("mnist-worker-1").container_restarts = 2;
  h.Pod("mnist-worker-1").exit_code = 1;
  h.Settle();
  ASSERT_EQ(h.job.status().restart_count(), 2);
  // Seen together: worker-1's pod is gone (its two restarts leave the
  // worker sum) and worker-0 restarted once.
  std::erase_if(h.observed.replicas,
                [](const ObservedReplica& r) { return r.name == "mnist-worker-1"; });
  h.Pod("mnist-worker-0").container_restarts = 1;
  h.Pod("mnist-worker-0").exit_code = 1;
  ReconcileResult r = h.Step();
  // A missing pod is created again without counting as a restart; worker-0's
  // restart counts (a per-role sum would have seen 2 -> 1: nothing new).
  EXPECT_EQ(r.status.restart_count(), 3);
  EXPECT_EQ(r.status.counted_container_restarts().at("mnist-worker-0"), 1);
  EXPECT_FALSE(r.status.counted_container_restarts().contains("mnist-worker-1"));
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
}

TEST(ReconcileTest, CompletedReplicasAreNeverRunAgain) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::Always);
  Harness h = Running(job);
  h.Exit("mnist-worker-0", 0);
  h.Settle();
  EXPECT_EQ(h.Pod("mnist-worker-0").phase, ReplicaPhase::kSucceeded);
  EXPECT_EQ(h.job.status().restart_count(), 0);
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  EXPECT_EQ(h.job.status().replica_statuses().at("worker").succeeded(), 1);
}

// ---- A chief lost at the end: its completed peers rejoin ------------------

// Workers and ps that finish before the chief (it still evaluates and
// exports) are done: nothing runs them again.
TEST(RejoinTest, PeersThatFinishBeforeTheChiefAreNotRunAgain) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  Harness h = Running(job);
  h.now += absl::Minutes(10);
  h.Exit("mnist-worker-0", 0);
  h.Exit("mnist-worker-1", 0);
  h.now += absl::Seconds(5);
  h.Exit("mnist-ps-0", 0);
  h.now += absl::Minutes(1);
  ReconcileResult r = h.Step();
  EXPECT_THAT(Deleted(r), IsEmpty());
  EXPECT_THAT(EventReasons(r), IsEmpty());
  h.Settle();
  h.Exit("mnist-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(h.job.status().restart_count(), 0);
}

// The chief restarted in place after its workers completed: they rejoin (a
// chief that resumes from a checkpoint before the end waits for every peer);
// the ps, restarted in place itself, runs on.
TEST(RejoinTest, AChiefRestartedInPlaceAfterItsWorkersCompletedGetsThemBack) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(5);
  Harness h = Running(job);
  h.now += absl::Minutes(10);
  h.Exit("mnist-worker-0", 0);
  h.Exit("mnist-worker-1", 0);
  h.Settle();
  // The master is killed; the kubelet starts it again, and the ps, which
  // lost it, too.
  h.now += absl::Seconds(20);
  for (const char* name : {"mnist-master-0", "mnist-ps-0"}) {
    ObservedReplica& again = h.Pod(name);
    again.container_restarts = 1;
    again.exit_code = name == std::string("mnist-master-0") ? 137 : 138;
    again.run_since = h.now;
  }
  ReconcileResult r = h.Step();
  EXPECT_THAT(Deleted(r), UnorderedElementsAre("mnist-worker-0", "mnist-worker-1"));
  EXPECT_THAT(EventReasons(r),
              UnorderedElementsAre("Restarting", "ReplicaRejoining", "ReplicaRejoining"));
  bool named = false;
  for (const Action& a : r.actions) {
    if (auto* e = std::get_if<EmitEvent>(&a); e && e->reason == "ReplicaRejoining") {
      EXPECT_EQ(e->type, EmitEvent::Type::kNormal);
      named = named || e->message ==
                           "worker-0 completed before master-0 started again; running it again "
                           "for master-0, which resumes with its peers";
    }
  }
  EXPECT_TRUE(named) << "no event names worker-0";
  // Created again at once: not failures, no backoff.
  r = h.Step();
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-worker-0", "mnist-worker-1"));
  h.Settle();
  h.RunAll();
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  EXPECT_EQ(h.job.status().restart_count(), 2);  // the two in-place restarts only
  // They finish again, now after the chief's run began: done for good.
  h.now += absl::Minutes(1);
  h.Exit("mnist-worker-0", 0);
  h.Exit("mnist-worker-1", 0);
  r = h.Step();
  EXPECT_THAT(Deleted(r), IsEmpty());
  h.Settle();
  h.Exit("mnist-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
}

// The chief's pod replaced (ExitCode policy: a SIGKILL is retryable) after
// the workers and the ps completed: every one of them rejoins once the new
// pod exists; an evaluator, not a peer of the training cluster, does not.
TEST(RejoinTest, AChiefRecreatedAfterItsPeersCompletedGetsThemBackButNotTheEvaluator) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_training_input()->set_evaluator_type("standard");
  job.mutable_spec()->mutable_training_input()->set_evaluator_count(1);
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::ExitCode);
  Harness h = Running(job);
  h.now += absl::Minutes(10);
  for (const char* name : {"mnist-worker-0", "mnist-worker-1", "mnist-ps-0", "mnist-evaluator-0"}) {
    h.Exit(name, 0);
  }
  h.Settle();
  h.now += absl::Seconds(3);
  h.Exit("mnist-master-0", 137);
  ReconcileResult r = h.Step();
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-master-0"));  // the peers wait for the new one
  h.now += absl::Seconds(10);                              // the recreation backoff
  r = h.Step();
  EXPECT_THAT(Created(r), ElementsAre("mnist-master-0"));
  r = h.Step();
  EXPECT_THAT(Deleted(r), UnorderedElementsAre("mnist-worker-0", "mnist-worker-1", "mnist-ps-0"));
  r = h.Step();
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-worker-0", "mnist-worker-1", "mnist-ps-0"));
  h.Settle();
  EXPECT_EQ(h.Pod("mnist-evaluator-0").phase, ReplicaPhase::kSucceeded);
  EXPECT_EQ(h.job.status().restart_count(), 1);
  h.RunAll();
  h.now += absl::Minutes(1);
  h.Exit("mnist-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
}

TEST(ReconcileTest, VanishedReplicaIsRecreatedWithoutCounting) {
  Harness h = Running(Job());
  std::erase_if(h.observed.replicas, [](const auto& o) { return o.name == "mnist-ps-0"; });
  ReconcileResult r = h.Step();
  EXPECT_THAT(Created(r), ElementsAre("mnist-ps-0"));
  EXPECT_EQ(r.status.restart_count(), 0);
  h.Settle();
}

TEST(ReconcileTest, ReplicaStuckTerminatingOnALostNodeNeverHangsTheJob) {
  for (const auto policy : {v1::RunPolicy::Never, v1::RunPolicy::OnFailure}) {
    SCOPED_TRACE(v1::RunPolicy::RestartPolicy_Name(policy));
    v1::TrainingJob job = Job();
    job.mutable_spec()->mutable_run_policy()->set_restart_policy(policy);
    Harness h = Running(job);
    // Someone (the node lifecycle controller) deletes it; it stays "Running".
    ObservedReplica& w = h.Pod("mnist-worker-0");
    w.deletion_requested = true;
    w.deletion_time = h.now + kGrace;
    ReconcileResult r = h.Step();
    EXPECT_TRUE(r.actions.empty());
    EXPECT_EQ(r.requeue_after, kGrace);
    h.now += kGrace;
    r = h.Step();
    if (policy == v1::RunPolicy::Never) {
      EXPECT_EQ(r.status.state(), v1::FAILED);
      EXPECT_THAT(r.status.error_message(), HasSubstr("worker-0 is stuck terminating"));
    } else {
      EXPECT_EQ(r.status.restart_count(), 1);
      EXPECT_THAT(Deleted(r), ElementsAre("mnist-worker-0"));
    }
  }
}

TEST(ReconcileTest, StrayReplicasAndServicesAreDeleted) {
  Harness h = Running(Job());
  ObservedReplica stray;
  stray.name = "mnist-worker-7";
  stray.key = {"", Role::kWorker, 7};
  h.observed.replicas.push_back(stray);
  ObservedReplica trial = stray;
  trial.name = "mnist-t1-worker-0";
  trial.key = {"1", Role::kWorker, 0};
  h.observed.replicas.push_back(trial);
  h.observed.services.push_back({"mnist-worker-9", {"", Role::kWorker, 9}});
  ReconcileResult r = h.Step();
  EXPECT_THAT(Deleted(r), UnorderedElementsAre("mnist-worker-7", "mnist-t1-worker-0"));
  EXPECT_THAT(ServicesDeleted(r), ElementsAre("mnist-worker-9"));
  h.Settle();
}

TEST(ReconcileTest, InvalidSpecFailsOnceWithFieldErrors) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_training_input()->clear_master_type();
  Harness h(job);
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("spec.trainingInput.masterType"));
  EXPECT_EQ(h.Condition("Failed")->reason(), "InvalidSpec");
  EXPECT_THAT(EventReasons(r), ElementsAre("InvalidSpec"));
  EXPECT_THAT(Created(r), IsEmpty());
  r = h.Step();
  EXPECT_TRUE(r.actions.empty());
  EXPECT_FALSE(r.status_changed);
  EXPECT_FALSE(r.requeue_after.has_value());
}

// A manifest applied with kubectl never passed `kubetrain validate`: the
// reconciler refuses its object-store jobDir the same way, before any pod.
TEST(ReconcileTest, ObjectStoreJobDirFailsTheJobNamingTheField) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_training_input()->set_job_dir("gs://my-bucket/run1");
  job.mutable_spec()->mutable_training_input()->set_python_module("trainer.task");
  job.mutable_spec()->mutable_training_input()->add_package_uris("gs://my-bucket/trainer.tar.gz");
  Harness h(job);
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_THAT(r.status.error_message(),
              HasSubstr("spec.trainingInput.jobDir: \"gs://my-bucket/run1\" names object storage"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("spec.trainingInput.packageUris[0]: "
                                                  "\"gs://my-bucket/trainer.tar.gz\""));
  EXPECT_THAT(Created(r), IsEmpty());
  h.Settle();
}

// ---- GPUs the machine does not have ----------------------------------------

TEST(NoGpuTest, AGpuJobOnAMachineWithoutGpusRunsWithAWarningOnce) {
  v1::TrainingJob job = Job(/*workers=*/0, /*ps=*/0);
  job.mutable_spec()->mutable_training_input()->clear_master_type();
  job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::BASIC_GPU);
  Harness h(job);
  h.options.machine_gpus = 0;
  ReconcileResult r = h.Step();
  EXPECT_THAT(Created(r), testing::SizeIs(1));  // it runs, on the CPU
  const v1::Condition* c = h.Condition("NoGpu");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status(), "True");
  EXPECT_EQ(c->reason(), "NotEnoughGpus");
  EXPECT_EQ(c->message(),
            "master asks for 1 GPU; this machine has none: the replicas run on the CPU, without "
            "the GPUs asked for");
  EXPECT_THAT(EventReasons(r), testing::Contains("NoGpu"));
  h.RunAll();
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(EventReasons(h.Step()), testing::Not(testing::Contains("NoGpu")));
  }
  h.Settle();
  EXPECT_EQ(h.Condition("NoGpu")->status(), "True");
}

TEST(NoGpuTest, EnoughGpusOrAnUnknownMachineSayNothing) {
  v1::TrainingJob custom = Job(/*workers=*/1, /*ps=*/0);
  v1::TrainingInput* input = custom.mutable_spec()->mutable_training_input();
  input->set_master_type("complex_model_m_gpu");  // 4 GPUs
  input->mutable_worker_config()->mutable_accelerator_config()->set_count(2);
  input->mutable_worker_config()->mutable_accelerator_config()->set_type(
      v1::AcceleratorConfig::NVIDIA_TESLA_T4);
  {
    Harness h(custom);
    h.options.machine_gpus = 2;
    h.Step();
    ASSERT_NE(h.Condition("NoGpu"), nullptr);
    EXPECT_EQ(h.Condition("NoGpu")->message(),
              "master asks for 4 GPUs; this machine has 2: the replicas run on the CPU, without "
              "the GPUs asked for");
  }
  {
    Harness h(custom);
    h.options.machine_gpus = 4;
    h.Step();
    EXPECT_EQ(h.Condition("NoGpu"), nullptr);
  }
  {
    Harness h(custom);  // Kubernetes: the scheduler decides
    h.Step();
    EXPECT_EQ(h.Condition("NoGpu"), nullptr);
  }
  {
    Harness h(Job());  // asks for none
    h.options.machine_gpus = 0;
    h.Step();
    EXPECT_EQ(h.Condition("NoGpu"), nullptr);
  }
}

// ---- Outputs ---------------------------------------------------------------

TEST(OutputsTest, OnKubernetesAJobDirOnNoSharedStorageIsAWarningOnce) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_training_input()->set_job_dir("/out");
  Harness h(job);
  h.options.replicas_have_own_filesystems = true;
  ReconcileResult r = h.Step();
  const v1::Condition* c = h.Condition("OutputsEphemeral");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status(), "True");
  EXPECT_EQ(c->reason(), "NoOutputStorage");
  EXPECT_THAT(c->message(), HasSubstr("the output folder /out is inside each replica's container: "
                                      "checkpoints, summaries and the exported model go with the "
                                      "pods, a recreated replica starts again from step 0"));
  EXPECT_THAT(c->message(), HasSubstr("spec.outputStorage"));
  EXPECT_THAT(EventReasons(r), testing::Contains("OutputsEphemeral"));
  for (const Action& a : r.actions) {
    if (auto* e = std::get_if<EmitEvent>(&a); e && e->reason == "OutputsEphemeral") {
      EXPECT_EQ(e->type, EmitEvent::Type::kWarning);
      EXPECT_EQ(e->message, c->message());
    }
  }
  EXPECT_TRUE(h.job.status().output_location().ephemeral());
  EXPECT_EQ(h.job.status().output_location().path(), "/out");
  h.RunAll();
  for (int i = 0; i < 4; ++i) {
    EXPECT_THAT(EventReasons(h.Step()), testing::Not(testing::Contains("OutputsEphemeral")));
  }
  h.Settle();

  // Naming a claim (a new generation of the spec) clears the condition.
  h.job.mutable_spec()->mutable_output_storage()->set_claim_name("team-outputs");
  h.job.mutable_metadata()->set_generation(2);
  h.Settle();
  EXPECT_EQ(h.Condition("OutputsEphemeral")->status(), "False");
  EXPECT_EQ(h.job.status().output_location().claim_name(), "team-outputs");
  EXPECT_FALSE(h.job.status().output_location().ephemeral());
}

TEST(OutputsTest, LocallyAndWithoutOutputsThereIsNoWarning) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_training_input()->set_job_dir("/out");
  Harness local(job);  // replicas share the machine's disk
  ReconcileResult r = local.Step();
  EXPECT_EQ(local.Condition("OutputsEphemeral"), nullptr);
  EXPECT_EQ(local.job.status().output_location().path(), "/out");
  EXPECT_FALSE(local.job.status().output_location().ephemeral());
  EXPECT_THAT(ClaimActions(r), IsEmpty());

  Harness nothing_kept(Job());  // no jobDir, no --output_path: nothing to lose
  nothing_kept.options.replicas_have_own_filesystems = true;
  nothing_kept.Step();
  EXPECT_EQ(nothing_kept.Condition("OutputsEphemeral"), nullptr);
  EXPECT_FALSE(nothing_kept.job.status().has_output_location());
}

TEST(OutputsTest, PerJobClaimIsAskedForOnceBeforeReplicasAndKeptAfterTheJob) {
  v1::TrainingJob job = Job(1, 0);
  job.mutable_spec()->mutable_training_input()->set_job_dir("/out");
  job.mutable_spec()->mutable_output_storage()->mutable_new_claim()->set_size("10Gi");
  Harness h(job);
  h.options.replicas_have_own_filesystems = true;
  ReconcileResult r = h.Step();
  EXPECT_THAT(ClaimActions(r), ElementsAre("create mnist-output"));
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-master-0", "mnist-worker-0"));
  EXPECT_EQ(h.job.status().output_location().claim_name(), "mnist-output");
  EXPECT_EQ(h.Condition("OutputsEphemeral"), nullptr);
  h.Settle();  // asked for once: it is observed now
  h.RunAll();
  h.Settle();
  h.Exit("mnist-master-0", 0);
  r = h.Step();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_THAT(ClaimActions(r), IsEmpty());
  h.Settle();
  EXPECT_THAT(h.observed.claims, ElementsAre("mnist-output"));

  // A running job whose claim went away (deleted by hand) asks for it again.
  Harness again(job);
  again.options.replicas_have_own_filesystems = true;
  again.Settle();
  again.observed.claims.clear();
  EXPECT_THAT(ClaimActions(again.Reconcile()), ElementsAre("create mnist-output"));
}

TEST(OutputsTest, PerJobClaimIsDeletedWhenFinishedOnlyWhenAsked) {
  v1::TrainingJob job = Job(1, 0);
  job.mutable_spec()->mutable_training_input()->set_job_dir("/out");
  job.mutable_spec()->mutable_output_storage()->mutable_new_claim()->set_size("10Gi");
  job.mutable_spec()->mutable_output_storage()->mutable_new_claim()->set_delete_when_finished(true);
  Harness h(job);
  h.options.replicas_have_own_filesystems = true;
  h.Settle();
  h.RunAll();
  h.Settle();
  h.Exit("mnist-master-0", 1);
  ReconcileResult r = h.Step();
  EXPECT_EQ(h.job.status().state(), v1::FAILED);
  EXPECT_THAT(ClaimActions(r), ElementsAre("delete mnist-output"));
  h.Settle();
  EXPECT_THAT(h.observed.claims, IsEmpty());

  // Cancelled before anything was created: no claim is made at all.
  v1::TrainingJob cancelled = job;
  cancelled.mutable_spec()->set_cancel(true);
  Harness c(cancelled);
  c.options.replicas_have_own_filesystems = true;
  c.Settle();
  EXPECT_THAT(c.observed.claims, IsEmpty());
}

// ---- Deadlines -------------------------------------------------------------

TEST(ReconcileTest, ActiveDeadlineFiresWithNoOtherEvent) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_active_deadline_seconds(600);
  Harness h = Running(job);
  const absl::Time created = absl::FromUnixSeconds(h.job.status().create_time().seconds());
  ReconcileResult r = h.Reconcile();
  ASSERT_TRUE(r.requeue_after.has_value());
  EXPECT_EQ(h.now + *r.requeue_after, created + absl::Seconds(600));
  // Nothing happens in the cluster; the timer alone brings the next call.
  h.now += *r.requeue_after;
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(h.Condition("Failed")->reason(), "DeadlineExceeded");
  EXPECT_EQ(Deleted(r).size(), 4u);
  h.Settle();
}

TEST(ReconcileTest, MaxRunningTimeCountsFromRunning) {
  v1::TrainingJob job = Job();
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_scheduling()
      ->mutable_max_running_time()
      ->set_seconds(3600);
  Harness h(job);
  h.Settle();
  h.now += absl::Minutes(30);  // pending for a while: does not count
  h.RunAll();
  h.Settle();
  ReconcileResult r = h.Reconcile();
  EXPECT_EQ(r.requeue_after, absl::Seconds(3600));
  h.now += absl::Seconds(3600);
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(h.Condition("Failed")->reason(), "MaxRunningTimeExceeded");
}

TEST(ReconcileTest, MaxWaitTimeFailsAJobThatNeverRuns) {
  v1::TrainingJob job = Job();
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_scheduling()
      ->mutable_max_wait_time()
      ->set_seconds(300);
  Harness h(job);
  h.Settle();  // replicas stay Pending (no room in the cluster)
  h.now += absl::Seconds(300);
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(h.Condition("Failed")->reason(), "MaxWaitTimeExceeded");
  EXPECT_EQ(Deleted(r).size(), 4u);  // pending replicas go (cleanPodPolicy Running)
}

// ---- Cancel, clean-up, TTL -------------------------------------------------

TEST(ReconcileTest, CancelDeletesEverythingThenEndsCancelled) {
  Harness h = Running(Job());
  h.slow_deletes = true;
  h.job.mutable_spec()->set_cancel(true);
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::CANCELLING);
  EXPECT_EQ(Deleted(r).size(), 4u);
  EXPECT_EQ(ServicesDeleted(r).size(), 4u);
  EXPECT_THAT(EventReasons(r), ElementsAre("Cancelling"));
  // Terminating within the grace period: wait, without deleting again.
  r = h.Step();
  EXPECT_EQ(r.status.state(), v1::CANCELLING);
  EXPECT_THAT(Deleted(r), IsEmpty());
  EXPECT_EQ(r.requeue_after, kGrace);
  // Three exit; one hangs on a lost node and is force-deleted.
  for (const char* name : {"mnist-master-0", "mnist-worker-0", "mnist-ps-0"}) {
    std::erase_if(h.observed.replicas, [&](const auto& o) { return o.name == name; });
  }
  h.now += kGrace;
  r = h.Step();
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-worker-1"));
  EXPECT_EQ(r.status.state(), v1::CANCELLED);
  EXPECT_TRUE(h.ConditionTrue("Cancelled"));
  h.Settle();
  EXPECT_THAT(h.Names(), IsEmpty());
}

TEST(ReconcileTest, SuspendDeletesReplicasUntilResumed) {
  Harness h = Running(Job());
  h.job.mutable_spec()->mutable_run_policy()->set_suspend(true);
  ReconcileResult r = h.Step();
  EXPECT_EQ(Deleted(r).size(), 4u);
  EXPECT_EQ(ServicesDeleted(r).size(), 4u);
  EXPECT_TRUE(h.ConditionTrue("Suspended"));
  EXPECT_FALSE(h.ConditionTrue("Running"));
  EXPECT_THAT(EventReasons(r), ElementsAre("Suspended"));
  h.Settle();
  EXPECT_THAT(h.Names(), IsEmpty());
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);

  h.job.mutable_spec()->mutable_run_policy()->set_suspend(false);
  r = h.Step();
  EXPECT_EQ(Created(r).size(), 4u);
  EXPECT_EQ(ServicesCreated(r).size(), 4u);
  EXPECT_FALSE(h.ConditionTrue("Suspended"));
  EXPECT_THAT(EventReasons(r), ElementsAre("Resumed"));
  EXPECT_EQ(r.status.restart_count(), 0);
  h.Settle();
  h.RunAll();
  h.Settle();
  EXPECT_TRUE(h.ConditionTrue("Running"));
}

TEST(ReconcileTest, CleanPodPolicies) {
  struct Case {
    v1::RunPolicy::CleanPodPolicy policy;
    std::vector<std::string> remaining;
    size_t services_left;
  };
  const Case cases[] = {
      {v1::RunPolicy::Running, {"mnist-master-0", "mnist-worker-0"}, 2},
      {v1::RunPolicy::All, {}, 0},
      {v1::RunPolicy::None,
       {"mnist-master-0", "mnist-worker-0", "mnist-worker-1", "mnist-ps-0"},
       4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(v1::RunPolicy::CleanPodPolicy_Name(c.policy));
    v1::TrainingJob job = Job();
    job.mutable_spec()->mutable_run_policy()->set_clean_pod_policy(c.policy);
    Harness h = Running(job);
    h.Exit("mnist-worker-0", 0);
    h.Exit("mnist-master-0", 0);
    h.Settle();
    EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
    EXPECT_THAT(h.Names(), UnorderedElementsAreArray(c.remaining));
    EXPECT_EQ(h.observed.services.size(), c.services_left);
  }
}

// Replicas deleted by the clean-up are not Active in status.replicaStatuses:
// not in the pass that deletes them, not while they terminate, not after.
TEST(ReconcileTest, CleanedUpReplicasAreNotReportedActive) {
  auto active = [](const v1::TrainingJobStatus& s, const std::string& role) {
    auto it = s.replica_statuses().find(role);
    return it == s.replica_statuses().end() ? 0 : it->second.active();
  };
  v1::TrainingJob job = Job(2, 2);
  Harness h = Running(job);
  EXPECT_EQ(active(h.job.status(), "ps"), 2);
  h.slow_deletes = true;
  h.Exit("mnist-master-0", 0);
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::SUCCEEDED);
  EXPECT_THAT(Deleted(r),
              UnorderedElementsAre("mnist-worker-0", "mnist-worker-1", "mnist-ps-0", "mnist-ps-1"));
  EXPECT_EQ(active(r.status, "ps"), 0);
  EXPECT_EQ(active(r.status, "worker"), 0);
  EXPECT_EQ(r.status.replica_statuses().at("master").succeeded(), 1);
  // Seen terminating, then gone: never active again.
  r = h.Step();
  EXPECT_EQ(active(r.status, "ps"), 0);
  EXPECT_EQ(active(r.status, "worker"), 0);
  h.now += kGrace;
  for (const std::string name : {"mnist-worker-0", "mnist-worker-1", "mnist-ps-0", "mnist-ps-1"}) {
    std::erase_if(h.observed.replicas, [&](const auto& o) { return o.name == name; });
  }
  h.Settle();
  EXPECT_FALSE(h.job.status().replica_statuses().contains("ps"));
  EXPECT_EQ(h.job.status().replica_statuses().at("master").succeeded(), 1);
  EXPECT_EQ(active(h.job.status(), "master"), 0);
}

TEST(ReconcileTest, TtlAfterFinishedDeletesTheJob) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_ttl_seconds_after_finished(60);
  Harness h = Running(job);
  h.Exit("mnist-master-0", 0);
  ReconcileResult r = h.Step();
  EXPECT_FALSE(r.delete_job);
  EXPECT_EQ(r.requeue_after, absl::Seconds(60));
  h.now += absl::Seconds(60);
  r = h.Step();
  EXPECT_TRUE(r.delete_job);
}

// ---- Tuning studies --------------------------------------------------------

v1::TrainingJob Study(int max_trials, int parallel) {
  v1::TrainingJob job = Job(1, 0);  // master + 1 worker per trial
  job.mutable_spec()->mutable_training_input()->set_job_dir("/out");
  v1::HyperparameterSpec* hp =
      job.mutable_spec()->mutable_training_input()->mutable_hyperparameters();
  hp->set_goal(v1::HyperparameterSpec::MAXIMIZE);
  hp->set_max_trials(max_trials);
  hp->set_max_parallel_trials(parallel);
  hp->set_hyperparameter_metric_tag("accuracy");
  v1::ParameterSpec* p = hp->add_params();
  p->set_parameter_name("x");
  p->set_type(v1::ParameterSpec::INTEGER);
  p->set_min_value(1);
  p->set_max_value(1000);
  p->set_scale_type(v1::ParameterSpec::UNIT_LINEAR_SCALE);
  return job;
}

void Report(Harness& h, const std::string& trial, int64_t step, double value) {
  h.observed.trial_metrics[trial].push_back({step, {{"accuracy", value}, {"loss", 1 - value}}});
}

const v1::HyperparameterOutput* Trial(const Harness& h, const std::string& id) {
  for (const auto& t : h.job.status().training_output().trials()) {
    if (t.trial_id() == id) return &t;
  }
  return nullptr;
}

TEST(StudyTest, TrialIsOnRecordInTheSameResultThatCreatesItsReplicas) {
  Harness h(Study(5, 2));
  h.options.metrics_address = "operator:9090";
  h.options.trial_token = [](const std::string& uid, const std::string& trial) {
    return uid + "/" + trial;
  };
  ReconcileResult r = h.Reconcile();
  ASSERT_EQ(r.status.training_output().trials_size(), 2);
  EXPECT_EQ(r.status.training_output().trials(0).trial_id(), "1");
  EXPECT_EQ(r.status.training_output().trials(0).hyperparameters().at("x"), "1");
  EXPECT_EQ(r.status.training_output().trials(0).state(), v1::QUEUED);
  EXPECT_EQ(r.status.training_output().total_trial_count(), 2);
  EXPECT_TRUE(r.status.training_output().is_hyperparameter_tuning_job());
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t1-master-0", "mnist-t1-worker-0",
                                               "mnist-t2-master-0", "mnist-t2-worker-0"));
  ASSERT_EQ(h.seeds.size(), 1u);
  EXPECT_EQ(h.seeds[0], StableHash("uid-1"));
  const DesiredReplica& m = CreateOf(r, "mnist-t2-master-0")->replica;
  EXPECT_THAT(m.args, ElementsAre("--x=2", "--job-dir", "/out/2"));
  EXPECT_EQ(m.Env("CLOUD_ML_TRIAL_ID"), "2");
  EXPECT_EQ(m.Env("KUBETRAIN_METRIC_TAG"), "accuracy");
  EXPECT_EQ(m.Env("KUBETRAIN_METRICS_ADDR"), "operator:9090");
  EXPECT_EQ(m.Env("KUBETRAIN_METRICS_TOKEN"), "uid-1/2");
  EXPECT_THAT(m.Env("TF_CONFIG"), HasSubstr(R"("trial":"2")"));
  EXPECT_THAT(m.Env("TF_CONFIG"), HasSubstr("mnist-t2-worker-0.default.svc:2222"));

  // The operator dies after writing status, before creating anything: the
  // next reconcile creates the same trials' replicas and asks for no new one.
  ReconcileResult again = h.Reconcile();
  EXPECT_THAT(Created(again), UnorderedElementsAreArray(Created(r)));
  EXPECT_EQ(again.status.training_output().trials_size(), 2);
  EXPECT_EQ(h.suggest_calls.size(), 1u);
  h.Apply(again);
  h.Settle();
  EXPECT_EQ(h.suggest_calls.size(), 1u);
  EXPECT_EQ(h.job.status().state(), v1::PREPARING);
}

TEST(StudyTest, TrialsWriteToTheirOwnOutputFolder) {
  v1::TrainingJob job = Study(1, 1);
  job.mutable_spec()->mutable_training_input()->add_args("--output_path=/b/out");
  job.mutable_spec()->mutable_training_input()->add_args("--lr=0.1");
  Harness h(job);
  ReconcileResult r = h.Reconcile();
  const CreateReplica* m = CreateOf(r, "mnist-t1-master-0");
  ASSERT_NE(m, nullptr);
  EXPECT_THAT(m->replica.args, ElementsAre("--output_path=/b/out", "--lr=0.1", "--x=1",
                                           "--output_path=/b/out/1", "--job-dir", "/out/1"));
}

TEST(OutputsTest, EveryTrialRecordsItsOutputFolder) {
  Harness h(Study(3, 2));
  h.options.replicas_have_own_filesystems = true;
  ReconcileResult r = h.Reconcile();
  ASSERT_EQ(r.status.training_output().trials_size(), 2);
  EXPECT_EQ(r.status.training_output().trials(0).output_path(), "/out/1");
  EXPECT_EQ(r.status.training_output().trials(1).output_path(), "/out/2");
  // The folder the trial's replicas are told.
  EXPECT_THAT(CreateOf(r, "mnist-t2-worker-0")->replica.args, testing::Contains("/out/2"));
}

TEST(StudyTest, ParallelismAndTotalCapsThenSortedBestFirst) {
  Harness h(Study(5, 2));
  h.Settle();
  h.RunAll();
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  const double objective[] = {0, 0.5, 0.9, 0.2, 0.7, 0.8};  // by trial number
  int finished = 0;
  while (h.job.status().state() == v1::RUNNING && finished < 10) {
    // Never more than 2 trials at once.
    int active = 0;
    for (const auto& t : h.job.status().training_output().trials()) {
      if (!IsTerminal(t.state())) ++active;
    }
    EXPECT_LE(active, 2);
    // Finish the lowest-numbered running trial.
    std::string id;
    for (const auto& t : h.job.status().training_output().trials()) {
      if (!IsTerminal(t.state())) {
        id = t.trial_id();
        break;
      }
    }
    ASSERT_FALSE(id.empty());
    Report(h, id, 100, objective[std::stoi(id)] / 2);
    Report(h, id, 200, objective[std::stoi(id)]);  // the last report counts
    h.Exit("mnist-t" + id + "-master-0", 0);
    h.Settle();
    h.RunAll();
    h.Settle();
    ++finished;
  }
  const v1::TrainingJobStatus& s = h.job.status();
  EXPECT_EQ(s.state(), v1::SUCCEEDED);
  EXPECT_EQ(finished, 5);
  EXPECT_EQ(s.training_output().total_trial_count(), 5);
  EXPECT_EQ(s.training_output().completed_trial_count(), 5);
  std::vector<std::string> order;
  for (const auto& t : s.training_output().trials()) order.push_back(t.trial_id());
  EXPECT_THAT(order, ElementsAre("2", "5", "4", "1", "3"));
  const auto& best = s.training_output().trials(0);
  EXPECT_EQ(best.final_metric().objective_value(), 0.9);
  EXPECT_EQ(best.final_metric().training_step(), 200);
  EXPECT_EQ(best.all_metrics_size(), 2);
  EXPECT_EQ(best.state(), v1::SUCCEEDED);
  EXPECT_THAT(h.Condition("Succeeded")->message(), HasSubstr("best trial 2"));
  // Each trial's worker was stopped when its master finished.
  for (const ObservedReplica& o : h.observed.replicas) {
    EXPECT_EQ(o.phase, ReplicaPhase::kSucceeded) << o.name;
  }
}

// What kubectl's Trials and Best columns read: "completed/max" from the first
// pass ("0/4" before any trial completes), the best final objective so far.
TEST(StudyTest, TrialProgressAndBestObjectiveForThePrinterColumns) {
  Harness h(Study(4, 2));
  ReconcileResult first = h.Reconcile();
  EXPECT_EQ(first.status.trial_progress(), "0/4");
  EXPECT_FALSE(first.status.has_best_objective_value());
  h.Apply(first);
  h.Settle();
  h.RunAll();
  h.Settle();
  EXPECT_EQ(h.job.status().trial_progress(), "0/4");
  EXPECT_FALSE(h.job.status().has_best_objective_value());

  Report(h, "1", 100, 0.9);
  Report(h, "1", 200, 0.6);  // the final metric is the last report, not the best one
  h.Exit("mnist-t1-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().trial_progress(), "1/4");
  EXPECT_EQ(h.job.status().best_objective_value(), 0.6);

  Report(h, "2", 100, 0.4);  // worse: the best stays
  h.Exit("mnist-t2-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().trial_progress(), "2/4");
  EXPECT_EQ(h.job.status().best_objective_value(), 0.6);

  h.RunAll();
  h.Settle();
  Report(h, "3", 100, 0.8);
  Report(h, "4", 100, 0.7);
  h.Exit("mnist-t3-master-0", 0);
  h.Exit("mnist-t4-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(h.job.status().trial_progress(), "4/4");
  EXPECT_EQ(h.job.status().best_objective_value(), 0.8);
  // Settled: nothing more to write.
  EXPECT_FALSE(h.Reconcile().status_changed);
}

TEST(StudyTest, BestObjectiveFollowsTheGoalAndOutlivesArchivedTrials) {
  v1::TrainingJob job = Study(2, 2);
  job.mutable_spec()->mutable_training_input()->mutable_hyperparameters()->set_goal(
      v1::HyperparameterSpec::MINIMIZE);
  Harness h(job);
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.3);
  Report(h, "2", 10, 0.1);
  h.Exit("mnist-t1-master-0", 0);
  h.Exit("mnist-t2-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().best_objective_value(), 0.1);
  // A backend without a job store: the best trial left status and is not
  // passed back; the column keeps showing it.
  h.job.mutable_status()->mutable_training_output()->mutable_trials()->DeleteSubrange(0, 1);
  ASSERT_EQ(h.job.status().training_output().trials(0).trial_id(), "1");
  EXPECT_EQ(h.Reconcile().status.best_objective_value(), 0.1);
}

TEST(StudyTest, AJobThatDoesNotTuneHasNoTrialProgress) {
  Harness h(Job(1, 0));
  h.Settle();
  h.RunAll();
  h.Exit("mnist-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(h.job.status().trial_progress(), "");
  EXPECT_FALSE(h.job.status().has_best_objective_value());
}

TEST(StudyTest, ReportsAnEarlierLeaderWroteStayAheadOfThisOperatorsOwn) {
  Harness h(Study(1, 1));
  h.Settle();
  h.RunAll();
  h.Settle();
  Report(h, "1", 100, 0.4);
  Report(h, "1", 200, 0.6);
  h.Settle();
  ASSERT_EQ(h.job.status().training_output().trials(0).all_metrics_size(), 2);
  // A new leader: the reports so far are in status only; it holds a later
  // one, and one it received again (a retry of step 200).
  h.observed.trial_metrics.clear();
  Report(h, "1", 200, 0.6);
  Report(h, "1", 300, 0.7);
  h.Exit("mnist-t1-master-0", 0);
  h.Settle();
  const v1::HyperparameterOutput& t = h.job.status().training_output().trials(0);
  std::vector<std::pair<int64_t, double>> curve;
  for (const auto& m : t.all_metrics()) curve.emplace_back(m.training_step(), m.objective_value());
  EXPECT_THAT(curve, ElementsAre(Pair(100, 0.4), Pair(200, 0.6), Pair(300, 0.7)));
  EXPECT_EQ(t.final_metric().objective_value(), 0.7);
  EXPECT_EQ(t.final_metric().training_step(), 300);
}

TEST(StudyTest, MinimizeSortsAscending) {
  v1::TrainingJob job = Study(2, 2);
  job.mutable_spec()->mutable_training_input()->mutable_hyperparameters()->set_goal(
      v1::HyperparameterSpec::MINIMIZE);
  Harness h(job);
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.3);
  Report(h, "2", 10, 0.1);
  h.Exit("mnist-t1-master-0", 0);
  h.Exit("mnist-t2-master-0", 0);
  h.Settle();
  ASSERT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(h.job.status().training_output().trials(0).trial_id(), "2");
}

TEST(StudyTest, FailedTrialLimitFailsTheJobAndStopsRunningTrials) {
  v1::TrainingJob job = Study(10, 3);
  job.mutable_spec()->mutable_training_input()->mutable_hyperparameters()->set_max_failed_trials(2);
  Harness h(job);
  h.Settle();
  h.RunAll();
  h.Settle();
  h.Exit("mnist-t1-worker-0", 1, "nan loss");
  h.Settle();
  EXPECT_EQ(Trial(h, "1")->state(), v1::FAILED);
  EXPECT_EQ(Trial(h, "1")->error_message(), "trial 1 worker-0 exited with code 1: nan loss");
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);  // 1 of 2: a fourth trial took its place
  EXPECT_NE(Trial(h, "4"), nullptr);
  EXPECT_EQ(h.Find("mnist-t1-master-0"), nullptr);  // its running master was stopped

  h.Exit("mnist-t2-master-0", 3, "bad flag");
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::FAILED);
  EXPECT_EQ(h.Condition("Failed")->reason(), "TrialsFailed");
  EXPECT_EQ(r.status.error_message(),
            "2 trials failed (maxFailedTrials 2); trial 1: trial 1 worker-0 exited with code 1: "
            "nan loss; trial 2: trial 2 master-0 exited with code 3: bad flag");
  EXPECT_EQ(Trial(h, "3")->state(), v1::CANCELLED);
  EXPECT_EQ(Trial(h, "4")->state(), v1::CANCELLED);
  h.Settle();
  for (const ObservedReplica& o : h.observed.replicas) {
    EXPECT_NE(o.phase, ReplicaPhase::kRunning) << o.name;
    EXPECT_NE(o.phase, ReplicaPhase::kPending) << o.name;
  }
}

TEST(StudyTest, EarlyStoppingStopsFlaggedTrials) {
  v1::TrainingJob job = Study(4, 2);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_enable_trial_early_stopping(true);
  Harness h(job);
  h.stop_trials = {"2"};
  h.Settle();
  h.RunAll();
  Report(h, "2", 10, 0.1);
  h.Settle();
  // The rule needs a completed trial to compare with.
  EXPECT_EQ(Trial(h, "2")->state(), v1::RUNNING);
  Report(h, "1", 10, 0.8);
  h.Exit("mnist-t1-master-0", 0);
  ReconcileResult r = h.Step();
  const v1::HyperparameterOutput* t2 = Trial(h, "2");
  EXPECT_EQ(t2->state(), v1::SUCCEEDED);
  EXPECT_TRUE(t2->is_trial_stopped_early());
  EXPECT_EQ(t2->final_metric().objective_value(), 0.1);
  EXPECT_THAT(Deleted(r),
              UnorderedElementsAre("mnist-t1-worker-0", "mnist-t2-master-0", "mnist-t2-worker-0"));
  EXPECT_EQ(r.status.training_output().completed_trial_count(), 2);
  h.Settle();
}

// hyperparameters.earlyStopping SUCCESSIVE_HALVING, reduction factor 2,
// rungs at reports 1, 2, 4, ...
v1::TrainingJob HalvingStudy(int max_trials, int parallel) {
  v1::TrainingJob job = Study(max_trials, parallel);
  v1::EarlyStoppingSpec* stopping = job.mutable_spec()
                                        ->mutable_training_input()
                                        ->mutable_hyperparameters()
                                        ->mutable_early_stopping();
  stopping->set_algorithm(v1::EarlyStoppingSpec::SUCCESSIVE_HALVING);
  stopping->set_reduction_factor(2);
  return job;
}

std::vector<double> RungValues(const v1::HyperparameterOutput& trial) {
  std::vector<double> values;
  for (const v1::HyperparameterMetric& m : trial.rung_metrics()) {
    values.push_back(m.objective_value());
  }
  return values;
}

TEST(StudyTest, HalvingStopsATrialBelowTheBarAtItsRungAndFillsTheSlotAtOnce) {
  Harness h(HalvingStudy(4, 2));
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.8);
  h.Settle();
  // Alone at rung 0: it continues, its value there recorded.
  EXPECT_EQ(Trial(h, "1")->state(), v1::RUNNING);
  EXPECT_THAT(RungValues(*Trial(h, "1")), ElementsAre(0.8));
  EXPECT_EQ(Trial(h, "1")->rung_metrics(0).training_step(), 10);
  Report(h, "2", 10, 0.3);
  ReconcileResult r = h.Step();
  const v1::HyperparameterOutput* t2 = Trial(h, "2");
  EXPECT_EQ(t2->state(), v1::SUCCEEDED);
  EXPECT_TRUE(t2->is_trial_stopped_early());
  EXPECT_EQ(t2->final_metric().objective_value(), 0.3);
  EXPECT_THAT(RungValues(*t2), ElementsAre(0.3));
  EXPECT_THAT(Deleted(r), UnorderedElementsAre("mnist-t2-master-0", "mnist-t2-worker-0"));
  // Its slot is filled in the same pass: nothing waits for the rung to fill.
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t3-master-0", "mnist-t3-worker-0"));
  EXPECT_EQ(Trial(h, "3")->state(), v1::QUEUED);
  // Trial 1 goes on to rung 1 (its second report), alone there.
  Report(h, "1", 20, 0.85);
  h.Settle();
  EXPECT_EQ(Trial(h, "1")->state(), v1::RUNNING);
  EXPECT_THAT(RungValues(*Trial(h, "1")), ElementsAre(0.8, 0.85));
  // A trial that ends is recorded at the rungs it reached, and not stopped.
  h.RunAll();
  Report(h, "3", 10, 0.1);
  h.observed.trial_metrics["3"].back().final = true;
  h.Settle();
  EXPECT_EQ(Trial(h, "3")->state(), v1::RUNNING);
  EXPECT_THAT(RungValues(*Trial(h, "3")), ElementsAre(0.1));
  h.Exit("mnist-t3-master-0", 0);
  h.Settle();
  EXPECT_EQ(Trial(h, "3")->state(), v1::SUCCEEDED);
  EXPECT_FALSE(Trial(h, "3")->is_trial_stopped_early());
}

// A decision at a rung is made once, when the trial reaches it: an operator
// that restarts (a fresh reconciler reading status) neither judges trial 1
// at rung 0 again, where better trials came after it, nor loses a record.
TEST(StudyTest, HalvingRecordsLiveInStatusAndAreNotRevisited) {
  Harness h(HalvingStudy(6, 3));
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.5);
  h.Settle();
  Report(h, "2", 10, 0.9);
  Report(h, "3", 10, 0.8);
  h.Settle();
  // Trial 2 (0.9 over 0.5) continues; trial 3 (n = 3, the best one
  // continues) stops.
  EXPECT_EQ(Trial(h, "2")->state(), v1::RUNNING);
  EXPECT_TRUE(Trial(h, "3")->is_trial_stopped_early());

  Harness restarted(h.job);
  restarted.observed = h.observed;
  restarted.Settle();
  const v1::HyperparameterOutput* t1 = Trial(restarted, "1");
  EXPECT_EQ(t1->state(), v1::RUNNING);
  EXPECT_FALSE(t1->is_trial_stopped_early());
  EXPECT_THAT(RungValues(*t1), ElementsAre(0.5));
  EXPECT_THAT(RungValues(*Trial(restarted, "2")), ElementsAre(0.9));
  EXPECT_THAT(RungValues(*Trial(restarted, "3")), ElementsAre(0.8));
  // At rung 1 trial 1 meets the others that got there: none yet.
  Report(restarted, "1", 20, 0.6);
  restarted.Settle();
  EXPECT_EQ(Trial(restarted, "1")->state(), v1::RUNNING);
  EXPECT_THAT(RungValues(*Trial(restarted, "1")), ElementsAre(0.5, 0.6));
  Report(restarted, "2", 20, 0.55);
  restarted.Settle();
  EXPECT_TRUE(Trial(restarted, "2")->is_trial_stopped_early());
  EXPECT_THAT(RungValues(*Trial(restarted, "2")), ElementsAre(0.9, 0.55));
}

// HalvingStudy with earlyStopping.pauseAtRungs: trials pause at rungs.
v1::TrainingJob PausingStudy(int max_trials, int parallel) {
  v1::TrainingJob job = HalvingStudy(max_trials, parallel);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->mutable_early_stopping()
      ->set_pause_at_rungs(true);
  return job;
}

// Rungs at reports 1, 2, 4 (reduction factor 2): of the n trials at a rung,
// the best floor(n / 2) earn the next one.
TEST(StudyTest, PausingPausesATrialAtARungUntilItEarnsTheNextAndEndsTheRestStopped) {
  Harness h(PausingStudy(4, 2));
  h.Settle();
  h.RunAll();
  // Alone at rung 0, trial 1 has earned nothing: paused, its slot refilled.
  Report(h, "1", 10, 0.8);
  ReconcileResult r = h.Step();
  const v1::HyperparameterOutput* t1 = Trial(h, "1");
  EXPECT_TRUE(t1->paused());
  EXPECT_EQ(t1->state(), v1::QUEUED);
  EXPECT_THAT(RungValues(*t1), ElementsAre(0.8));
  // Its master first: its checkpoint may need the others.
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-t1-master-0"));
  EXPECT_THAT(ServicesDeleted(r), IsEmpty());  // kept for its resumption
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t3-master-0", "mnist-t3-worker-0"));
  EXPECT_THAT(Events(r),
              testing::Contains("Normal TrialPaused: trial 1 paused at rung 0 (step 10): "
                                "objective 0.8; it resumes once among the best 1/2 there"));
  r = h.Step();
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-t1-worker-0"));
  h.Settle();
  EXPECT_EQ(h.Find("mnist-t1-master-0"), nullptr);

  // Trial 2 reaches rung 0 below it: trial 1 is the best 1 of 2 there, and
  // takes trial 2's slot, with the same output folder.
  h.RunAll();
  Report(h, "2", 10, 0.6);
  r = h.Step();
  EXPECT_TRUE(Trial(h, "2")->paused());
  t1 = Trial(h, "1");
  EXPECT_FALSE(t1->paused());
  EXPECT_EQ(t1->state(), v1::QUEUED);
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t1-master-0", "mnist-t1-worker-0"));
  EXPECT_THAT(Events(r),
              testing::Contains("Normal TrialResumed: trial 1 earned rung 1 (objective 0.8 at "
                                "rung 0): resuming from its latest checkpoint"));
  EXPECT_EQ(Trial(h, "4"), nullptr);  // both slots are taken
  h.Settle();
  h.RunAll();
  h.Settle();
  EXPECT_EQ(Trial(h, "1")->state(), v1::RUNNING);

  // Its trainer goes on from its checkpoint: rung 1 at its second report,
  // alone there, so paused again; trial 2 has not earned rung 1 (0.6 under
  // 0.8), so the slot starts trial 4.
  Report(h, "1", 20, 0.85);
  r = h.Step();
  EXPECT_TRUE(Trial(h, "1")->paused());
  EXPECT_THAT(RungValues(*Trial(h, "1")), ElementsAre(0.8, 0.85));
  EXPECT_TRUE(Trial(h, "2")->paused());
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t4-master-0", "mnist-t4-worker-0"));
  h.Settle();
  h.RunAll();
  // Trial 3 arrives at rung 0 as the best of 3 (1 place): it goes on.
  Report(h, "3", 10, 0.9);
  r = h.Step();
  EXPECT_FALSE(Trial(h, "3")->paused());
  EXPECT_THAT(Deleted(r), IsEmpty());
  // Trial 4 is the third of 4 (2 places: 0.9 and 0.8): paused; trial 2 has
  // not earned either, and maxTrials are started.
  Report(h, "4", 10, 0.7);
  r = h.Step();
  EXPECT_TRUE(Trial(h, "4")->paused());
  EXPECT_THAT(Created(r), IsEmpty());
  // Trial 3 ends. Nothing runs and nothing can earn a rung any more: each
  // trial still paused ends stopped early at its rung, with its last report.
  h.observed.trial_metrics["3"].push_back({20, {{"accuracy", 0.92}}, /*final=*/true});
  h.Exit("mnist-t3-master-0", 0);
  h.Settle();
  ASSERT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(h.job.status().training_output().completed_trial_count(), 4);
  EXPECT_EQ(h.job.status().training_output().trials(0).trial_id(), "3");
  EXPECT_FALSE(Trial(h, "3")->is_trial_stopped_early());
  for (const char* id : {"1", "2", "4"}) {
    const v1::HyperparameterOutput* t = Trial(h, id);
    EXPECT_EQ(t->state(), v1::SUCCEEDED) << id;
    EXPECT_TRUE(t->is_trial_stopped_early()) << id;
    EXPECT_FALSE(t->paused()) << id;
  }
  EXPECT_EQ(Trial(h, "1")->final_metric().objective_value(), 0.85);
  EXPECT_EQ(Trial(h, "1")->final_metric().training_step(), 20);
  EXPECT_EQ(Trial(h, "4")->final_metric().objective_value(), 0.7);
  // Only trial 3's completed master is left (cleanPodPolicy Running).
  EXPECT_THAT(h.Names(), ElementsAre("mnist-t3-master-0"));
}

// When no trial runs and none is left to start, no paused trial can earn a
// rung any more: the one that leads at the highest rung is resumed to its
// end, past the rungs it then reaches alone, and the others end stopped.
TEST(StudyTest, PausingTrainsTheLeaderToItsEndOnceNoTrialIsLeftToStart) {
  Harness h(PausingStudy(3, 1));
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.8);
  h.Settle();
  ASSERT_TRUE(Trial(h, "1")->paused());
  h.RunAll();
  Report(h, "2", 10, 0.9);  // the best 1 of 2 at rung 0: goes on
  h.Settle();
  ASSERT_FALSE(Trial(h, "2")->paused());
  Report(h, "2", 20, 0.91);  // alone at rung 1, and trial 3 is still to come
  h.Settle();
  ASSERT_TRUE(Trial(h, "2")->paused());
  h.RunAll();
  Report(h, "3", 10, 0.5);
  ReconcileResult r = h.Step();
  EXPECT_TRUE(Trial(h, "3")->paused());
  EXPECT_FALSE(Trial(h, "2")->paused());
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t2-master-0", "mnist-t2-worker-0"));
  EXPECT_THAT(Events(r),
              testing::Contains("Normal TrialResumed: trial 2 leads at the highest rung reached, "
                                "and no trial is left to start: it trains to its end: resuming "
                                "from its latest checkpoint"));
  h.Settle();
  h.RunAll();
  // Alone at rung 2 as well: it leads there, so it is not paused again.
  Report(h, "2", 30, 0.92);
  Report(h, "2", 40, 0.93);
  r = h.Step();
  EXPECT_THAT(RungValues(*Trial(h, "2")), ElementsAre(0.9, 0.91, 0.93));
  EXPECT_FALSE(Trial(h, "2")->paused());
  EXPECT_THAT(Deleted(r), IsEmpty());
  h.observed.trial_metrics["2"].push_back({50, {{"accuracy", 0.94}}, /*final=*/true});
  h.Exit("mnist-t2-master-0", 0);
  h.Settle();
  ASSERT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_FALSE(Trial(h, "2")->is_trial_stopped_early());
  EXPECT_EQ(Trial(h, "2")->final_metric().objective_value(), 0.94);
  EXPECT_TRUE(Trial(h, "1")->is_trial_stopped_early());
  EXPECT_TRUE(Trial(h, "3")->is_trial_stopped_early());
}

// An operator that restarts in the middle of a pausing study (a fresh
// reconciler reading status) keeps every trial's rungs and pauses: a paused
// trial is not started again, and is resumed when it earns its rung.
TEST(StudyTest, PausedTrialsAndTheirRungsSurviveAnOperatorRestart) {
  Harness h(PausingStudy(6, 2));
  h.slow_deletes = true;
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.8);
  h.Step();
  ASSERT_TRUE(Trial(h, "1")->paused());
  ASSERT_TRUE(h.Pod("mnist-t1-master-0").deletion_requested);  // terminating

  Harness restarted(h.job);
  restarted.slow_deletes = true;
  restarted.observed = h.observed;
  restarted.now = h.now;
  ReconcileResult r = restarted.Step();
  EXPECT_TRUE(Trial(restarted, "1")->paused());
  EXPECT_THAT(RungValues(*Trial(restarted, "1")), ElementsAre(0.8));
  EXPECT_THAT(Created(r), IsEmpty());
  EXPECT_THAT(Deleted(r), IsEmpty());  // its deletes are under way already
  // Trial 2 below it at rung 0: trial 1 is resumed, and its replicas are
  // created again once the terminating ones are gone.
  restarted.RunAll();
  Report(restarted, "2", 10, 0.5);
  r = restarted.Step();
  EXPECT_FALSE(Trial(restarted, "1")->paused());
  EXPECT_TRUE(Trial(restarted, "2")->paused());
  EXPECT_THAT(Created(r), IsEmpty());
  std::erase_if(restarted.observed.replicas,
                [](const ObservedReplica& o) { return o.key.trial_id == "1"; });
  r = restarted.Step();
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t1-master-0", "mnist-t1-worker-0"));
  // A paused trial whose delete was lost (its replica still running, not
  // terminating) has it deleted again.
  ObservedReplica& t2 = restarted.Pod("mnist-t2-master-0");
  t2.deletion_requested = false;
  t2.phase = ReplicaPhase::kRunning;
  r = restarted.Step();
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-t2-master-0"));
}

// Two trials reach rung 0 in one pass: the pauses are decided with both
// values on record, so trial 1, the best 1 of 2 there, is not paused (and
// then resumed) on the way.
TEST(StudyTest, PausesAreDecidedWithEveryRungOfThePassOnRecord) {
  Harness h(PausingStudy(4, 2));
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.9);
  Report(h, "2", 10, 0.5);
  ReconcileResult r = h.Step();
  EXPECT_FALSE(Trial(h, "1")->paused());
  EXPECT_TRUE(Trial(h, "2")->paused());
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-t2-master-0"));
  EXPECT_THAT(EventReasons(r), testing::Not(testing::Contains("TrialResumed")));
}

// A trainer that finished before its pause took effect (its final report
// came while its replicas were being deleted) has trained to its end: the
// trial is completed, not paused, and not stopped early.
TEST(StudyTest, APausedTrialWhoseTrainerFinishedIsCompleted) {
  Harness h(PausingStudy(4, 2));
  h.slow_deletes = true;
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.8);
  h.Step();
  ASSERT_TRUE(Trial(h, "1")->paused());
  h.observed.trial_metrics["1"].push_back({20, {{"accuracy", 0.85}}, /*final=*/true});
  h.Step();
  const v1::HyperparameterOutput* t1 = Trial(h, "1");
  EXPECT_EQ(t1->state(), v1::SUCCEEDED);
  EXPECT_FALSE(t1->paused());
  EXPECT_FALSE(t1->is_trial_stopped_early());
  EXPECT_EQ(t1->final_metric().objective_value(), 0.85);
  EXPECT_EQ(h.job.status().training_output().completed_trial_count(), 1);
}

// A cancelled study cancels its paused trials too: they end, and wait for
// nothing any more.
TEST(StudyTest, CancellingAPausingStudyEndsItsPausedTrials) {
  Harness h(PausingStudy(4, 2));
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.8);
  h.Settle();
  ASSERT_TRUE(Trial(h, "1")->paused());
  h.job.mutable_spec()->set_cancel(true);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::CANCELLED);
  EXPECT_EQ(Trial(h, "1")->state(), v1::CANCELLED);
  EXPECT_FALSE(Trial(h, "1")->paused());
}

// A trainer that resumed from a checkpoint older than its last report
// reports those steps again: they replace the earlier reports, so none
// counts twice toward a rung.
TEST(StudyTest, ReportsAStepAgainReplaceTheReportsFromThatStepOn) {
  Harness h(Study(2, 2));
  h.Settle();
  h.RunAll();
  // Each pass sees one more, so status holds the earlier reports when the
  // replayed ones come: the trainer restarted from its checkpoint at step
  // 10 after reporting step 30.
  const std::pair<int64_t, double> reports[] = {{10, 0.5},  {20, 0.6},  {30, 0.62},
                                                {20, 0.61}, {30, 0.64}, {40, 0.7}};
  for (const auto& [step, value] : reports) {
    Report(h, "1", step, value);
    h.Settle();
  }
  std::vector<std::pair<int64_t, double>> curve;
  for (const auto& m : Trial(h, "1")->all_metrics()) {
    curve.emplace_back(m.training_step(), m.objective_value());
  }
  EXPECT_THAT(curve, ElementsAre(Pair(10, 0.5), Pair(20, 0.61), Pair(30, 0.64), Pair(40, 0.7)));

  // An operator that leads next holds only the reports that came to it
  // since: those in status stay ahead of them, except the ones they replay.
  Harness next(h.job);
  next.observed = h.observed;
  next.observed.trial_metrics["1"].clear();
  Report(next, "1", 30, 0.66);  // restarted from the checkpoint at step 20
  Report(next, "1", 50, 0.75);
  next.Settle();
  curve.clear();
  for (const auto& m : Trial(next, "1")->all_metrics()) {
    curve.emplace_back(m.training_step(), m.objective_value());
  }
  EXPECT_THAT(curve, ElementsAre(Pair(10, 0.5), Pair(20, 0.61), Pair(30, 0.66), Pair(50, 0.75)));
}

// Events name an objective as the trainer reported it.
TEST(StudyTest, ObjectivesInEventsAreAsReported) {
  Harness h(Study(4, 2));
  h.Settle();
  h.RunAll();
  h.Settle();
  Report(h, "1", 10, 0.8804);
  h.Exit("mnist-t1-master-0", 0);
  ReconcileResult r = h.Step();
  // Not std::to_string's 0.880400.
  bool found = false;
  for (const Action& a : r.actions) {
    if (auto* e = std::get_if<EmitEvent>(&a); e && e->reason == "TrialSucceeded") {
      EXPECT_EQ(e->message, "trial 1: objective 0.8804 at step 10");
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

// A trial whose trainer sent its final report has finished training: the
// rule no longer judges it, and it ends SUCCEEDED without the mark.
TEST(StudyTest, AFinalReportIsNeverJudged) {
  v1::TrainingJob job = Study(3, 2);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_enable_trial_early_stopping(true);
  Harness h(job);
  std::vector<std::string> judged;
  h.options.stop_rule = [&](const v1::HyperparameterSpec&, const tuner::TrialRecord& running,
                            const std::vector<tuner::TrialRecord>&) {
    judged.push_back(running.trial_id);
    return true;  // would stop every trial it is asked about
  };
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.8);
  h.Exit("mnist-t1-master-0", 0);
  h.Settle();
  ASSERT_EQ(Trial(h, "1")->state(), v1::SUCCEEDED);
  EXPECT_FALSE(Trial(h, "1")->is_trial_stopped_early());
  // Trial 2's last evaluation arrives while its replicas still run.
  h.observed.trial_metrics["2"].push_back({30, {{"accuracy", 0.1}}, /*final=*/true});
  judged.clear();
  h.Settle();
  EXPECT_THAT(judged, ::testing::Not(::testing::Contains("2")));
  EXPECT_EQ(Trial(h, "2")->state(), v1::RUNNING);
  EXPECT_NE(h.Find("mnist-t2-master-0"), nullptr);
  h.Exit("mnist-t2-master-0", 0);
  h.Settle();
  EXPECT_EQ(Trial(h, "2")->state(), v1::SUCCEEDED);
  EXPECT_FALSE(Trial(h, "2")->is_trial_stopped_early());
  EXPECT_EQ(Trial(h, "2")->final_metric().training_step(), 30);
}

// The rule compares with trials that ran to their end, not with those it
// stopped (their curves were cut short).
TEST(StudyTest, StoppedTrialsAreNotWhatOthersAreComparedWith) {
  v1::TrainingJob job = Study(4, 3);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_enable_trial_early_stopping(true);
  Harness h(job);
  std::map<std::string, std::set<std::string>> compared_with;
  h.options.stop_rule = [&](const v1::HyperparameterSpec&, const tuner::TrialRecord& running,
                            const std::vector<tuner::TrialRecord>& completed) {
    for (const tuner::TrialRecord& c : completed)
      compared_with[running.trial_id].insert(c.trial_id);
    return running.trial_id == "2";
  };
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.8);
  h.Exit("mnist-t1-master-0", 0);
  Report(h, "2", 10, 0.1);
  h.Settle();
  ASSERT_TRUE(Trial(h, "2")->is_trial_stopped_early());
  compared_with.clear();
  h.RunAll();
  Report(h, "3", 20, 0.5);
  h.Settle();
  EXPECT_EQ(compared_with["3"], (std::set<std::string>{"1"}));
}

TEST(StudyTest, TrialWithoutTheMetricIsMarkedAndNotCounted) {
  Harness h(Study(2, 1));
  h.Settle();
  h.RunAll();
  h.Exit("mnist-t1-master-0", 0);
  h.Settle();
  const v1::HyperparameterOutput* t1 = Trial(h, "1");
  EXPECT_EQ(t1->state(), v1::SUCCEEDED);
  EXPECT_EQ(t1->error_message(),
            "succeeded without reporting metric 'accuracy': not counted as completed");
  EXPECT_EQ(h.job.status().training_output().completed_trial_count(), 0);
  // The second trial has no metric either: the study has nothing to show.
  h.RunAll();
  h.Exit("mnist-t2-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::FAILED);
  EXPECT_EQ(h.Condition("Failed")->reason(), "NoTrialCompleted");
}

TEST(StudyTest, ExhaustedSearchSpaceEndsTheStudy) {
  Harness h(Study(10, 2));
  h.tuner_capacity = 2;
  h.Settle();
  h.RunAll();
  for (const char* id : {"1", "2"}) {
    Report(h, id, 1, 0.5);
    h.Exit(std::string("mnist-t") + id + "-master-0", 0);
  }
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(h.job.status().training_output().total_trial_count(), 2);
  EXPECT_THAT(h.Condition("Succeeded")->message(), HasSubstr("search space exhausted"));
}

TEST(StudyTest, CancelStopsTrials) {
  Harness h(Study(4, 2));
  h.Settle();
  h.RunAll();
  h.Settle();
  h.job.mutable_spec()->set_cancel(true);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::CANCELLED);
  EXPECT_EQ(Trial(h, "1")->state(), v1::CANCELLED);
  EXPECT_THAT(h.Names(), IsEmpty());
}

TEST(StudyTest, StatusKeepsTheBestTrialsAndArchivesTheRest) {
  const int kTrials = kMaxTrialsInStatus + 20;
  Harness h(Study(kTrials, kTrials));
  h.options.services = false;
  h.Settle();
  ASSERT_EQ(h.job.status().training_output().trials_size(), kTrials);
  h.RunAll();
  for (int i = 1; i <= kTrials; ++i) {
    Report(h, std::to_string(i), 1, i / 1000.0);  // higher id, better
    h.Exit("mnist-t" + std::to_string(i) + "-master-0", 0);
  }
  h.Settle();
  const v1::TrainingOutput& out = h.job.status().training_output();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(out.trials_size(), kMaxTrialsInStatus);
  EXPECT_EQ(out.total_trial_count(), kTrials);
  EXPECT_EQ(out.completed_trial_count(), kTrials);
  EXPECT_EQ(out.trials(0).trial_id(), std::to_string(kTrials));
  ASSERT_EQ(h.observed.archived_trials.size(), 20u);
  for (const auto& t : h.observed.archived_trials) EXPECT_LE(std::stoi(t.trial_id()), 20);
}

TEST(StudyTest, LongStudyKeepsStatusCappedAndTheTunerSeesEverything) {
  const int kTrials = kMaxTrialsInStatus + 5;
  v1::TrainingJob job = Study(kTrials, 1);
  job.mutable_spec()->mutable_training_input()->clear_worker_type();
  job.mutable_spec()->mutable_training_input()->clear_worker_count();
  job.mutable_spec()->mutable_training_input()->mutable_hyperparameters()->set_max_failed_trials(5);
  Harness h(job);
  h.options.services = false;
  for (int i = 1; i <= kTrials; ++i) {
    const std::string id = std::to_string(i);
    h.Settle();
    h.RunAll();
    if (i == 1) {
      h.Exit("mnist-t1-master-0", 1, "diverged");  // the worst trial of all
    } else {
      Report(h, id, 1, i);
      h.Exit("mnist-t" + id + "-master-0", 0);
    }
    h.Settle();
    EXPECT_LE(h.job.status().training_output().trials_size(), kMaxTrialsInStatus);
    if (i < kTrials) {
      // Failed trials are not archived while the study runs.
      ASSERT_NE(Trial(h, "1"), nullptr) << "after trial " << i;
      EXPECT_EQ(Trial(h, "1")->state(), v1::FAILED);
    }
  }
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(h.job.status().training_output().completed_trial_count(), kTrials - 1);
  // One suggestion per trial, each seeing every earlier trial.
  ASSERT_EQ(h.suggest_calls.size(), static_cast<size_t>(kTrials));
  for (int i = 0; i < kTrials; ++i) {
    EXPECT_EQ(h.suggest_calls[i], (std::pair<size_t, int>(i, 1)));
  }
  // Trials 2..6, the worst with an objective, left as 101..105 arrived.
  std::vector<std::string> archived;
  for (const auto& t : h.observed.archived_trials) archived.push_back(t.trial_id());
  EXPECT_THAT(archived, ElementsAre("2", "3", "4", "5", "6"));
  const auto& trials = h.job.status().training_output().trials();
  EXPECT_EQ(trials.size(), kMaxTrialsInStatus);
  EXPECT_EQ(trials[0].trial_id(), std::to_string(kTrials));  // best first
  EXPECT_EQ(trials[trials.size() - 1].trial_id(), "1");      // failed last
}

// No trial is both archived and in status at the end of a reconcile, and none
// counts twice.
void ExpectEachTrialOnRecordOnce(const Harness& h) {
  for (const v1::HyperparameterOutput& t : h.observed.archived_trials) {
    EXPECT_EQ(Trial(h, t.trial_id()), nullptr) << "trial " << t.trial_id() << " is in both";
  }
}

// Trials are archived before the status write that drops them from status
// (core::CarryOut). When that write fails (409: the job changed meanwhile),
// the carry-out stops there, and the next reconcile sees those trials both
// archived and in status, as it does when a backend's copy of the job lags
// behind its archive. Here they were running in the status that was kept.
TEST(StudyTest, TrialsArchivedByALostStatusWriteCountOnce) {
  const int kTrials = kMaxTrialsInStatus + 2;
  Harness h(Study(kTrials, kTrials - 1));
  h.options.services = false;
  h.Settle();
  h.RunAll();
  for (int i = 1; i < kTrials; ++i) {
    Report(h, std::to_string(i), 1, i / 1000.0);  // higher id, better
    h.Exit("mnist-t" + std::to_string(i) + "-master-0", 0);
  }
  // This reconcile finishes those trials, starts the last one and archives
  // the two worst; only the archive is carried out.
  const v1::TrainingJobStatus before = h.job.status();
  const ReconcileResult lost = h.Reconcile();
  *h.job.mutable_status() = before;
  for (const Action& a : lost.actions) {
    if (auto* ar = std::get_if<ArchiveTrial>(&a)) h.Archive(ar->trial);
  }
  std::vector<std::string> archived;
  for (const auto& t : h.observed.archived_trials) archived.push_back(t.trial_id());
  ASSERT_THAT(archived, ElementsAre("1", "2"));
  ASSERT_NE(Trial(h, "1"), nullptr);

  h.Step();
  auto out = [&]() -> const v1::TrainingOutput& { return h.job.status().training_output(); };
  EXPECT_EQ(out().completed_trial_count(), kTrials - 1);
  EXPECT_EQ(h.job.status().trial_progress(),
            std::to_string(kTrials - 1) + "/" + std::to_string(kTrials));
  EXPECT_EQ(out().total_trial_count(), kTrials);
  EXPECT_EQ(out().trials_size(), kMaxTrialsInStatus);
  ExpectEachTrialOnRecordOnce(h);
  std::vector<std::string> seen;
  for (const tuner::TrialRecord& t : h.last_history) seen.push_back(t.trial_id);
  std::vector<std::string> finished;
  for (int i = 1; i < kTrials; ++i) finished.push_back(std::to_string(i));
  EXPECT_THAT(seen, UnorderedElementsAreArray(finished));

  h.Settle();
  h.RunAll();
  Report(h, std::to_string(kTrials), 1, 0.5);
  h.Exit("mnist-t" + std::to_string(kTrials) + "-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(out().completed_trial_count(), kTrials);
  EXPECT_EQ(static_cast<size_t>(out().trials_size()) + h.observed.archived_trials.size(),
            static_cast<size_t>(kTrials));
  ExpectEachTrialOnRecordOnce(h);
}

// The same loss when the archived trial had finished already, and trials
// that finished since rank below it, so that the cap alone would keep it in
// status: it leaves status, as the lost write meant it to.
TEST(StudyTest, AFinishedTrialArchivedByALostStatusWriteLeavesStatus) {
  Harness h(Study(4, 2));
  h.options.services = false;
  h.Settle();
  h.RunAll();
  Report(h, "1", 1, 0.9);
  Report(h, "2", 1, 0.8);
  h.Exit("mnist-t1-master-0", 0);
  h.Exit("mnist-t2-master-0", 0);
  h.Settle();
  ASSERT_EQ(h.job.status().training_output().completed_trial_count(), 2);
  ASSERT_NE(Trial(h, "3"), nullptr);
  h.Archive(*Trial(h, "1"));  // what the lost write left, the best so far

  h.Step();
  auto out = [&]() -> const v1::TrainingOutput& { return h.job.status().training_output(); };
  EXPECT_EQ(out().completed_trial_count(), 2);
  EXPECT_EQ(Trial(h, "1"), nullptr);
  ASSERT_EQ(h.observed.archived_trials.size(), 1u);
  EXPECT_EQ(h.observed.archived_trials[0].final_metric().objective_value(), 0.9);

  h.RunAll();
  Report(h, "3", 1, 0.1);
  Report(h, "4", 1, 0.2);
  h.Exit("mnist-t3-master-0", 0);
  h.Exit("mnist-t4-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(out().completed_trial_count(), 4);
  std::vector<std::string> in_status;
  for (const auto& t : out().trials()) in_status.push_back(t.trial_id());
  EXPECT_THAT(in_status, ElementsAre("2", "4", "3"));
  ExpectEachTrialOnRecordOnce(h);
  // The best trial is named even though status no longer holds it.
  bool said = false;
  for (const v1::Condition& cond : h.job.status().conditions()) {
    if (cond.type() == "Succeeded") {
      said = true;
      EXPECT_THAT(cond.message(), HasSubstr("; best trial 1: objective 0.9"));
    }
  }
  EXPECT_TRUE(said);
}

// ---- Resumed studies (resumePreviousJobId) ---------------------------------

v1::HyperparameterOutput FinishedTrial(const std::string& id, const std::string& x, double value,
                                       v1::State state = v1::SUCCEEDED) {
  v1::HyperparameterOutput t;
  t.set_trial_id(id);
  (*t.mutable_hyperparameters())["x"] = x;
  t.set_state(state);
  if (state == v1::SUCCEEDED) {
    t.mutable_final_metric()->set_training_step(10);
    t.mutable_final_metric()->set_objective_value(value);
    *t.add_all_metrics() = t.final_metric();
  } else {
    t.set_error_message("exited with code 1");
  }
  return t;
}

// A finished study named "earlier", with the same goal, tag and parameter as
// Study(): trials x=10 (0.5), x=20 (0.7) in status, x=30 (0.6) archived.
PreviousStudy Earlier() {
  PreviousStudy previous;
  previous.found = true;
  previous.job = Study(3, 1);
  previous.job.mutable_metadata()->set_name("earlier");
  previous.job.mutable_metadata()->set_uid("uid-0");
  previous.job.mutable_status()->set_state(v1::SUCCEEDED);
  auto* out = previous.job.mutable_status()->mutable_training_output();
  *out->add_trials() = FinishedTrial("2", "20", 0.7);
  *out->add_trials() = FinishedTrial("1", "10", 0.5);
  previous.archived_trials.push_back(FinishedTrial("3", "30", 0.6));
  return previous;
}

v1::TrainingJob Resuming(int max_trials, int parallel) {
  v1::TrainingJob job = Study(max_trials, parallel);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_resume_previous_job_id("earlier");
  return job;
}

TEST(ResumeTest, EarlierTrialsSeedTheTunerButAreNotThisJobsTrials) {
  Harness h(Resuming(2, 2));
  h.observed.previous_study = Earlier();
  auto* earlier_out = h.observed.previous_study.job.mutable_status()->mutable_training_output();
  // Left out: a failed trial, a metric-less one, and three that do not fit
  // the spec (out of range, not an integer, an extra parameter).
  *earlier_out->add_trials() = FinishedTrial("4", "40", 0, v1::FAILED);
  v1::HyperparameterOutput no_metric = FinishedTrial("5", "50", 0.9);
  no_metric.clear_final_metric();
  no_metric.set_error_message("succeeded without reporting metric");
  *earlier_out->add_trials() = no_metric;
  *earlier_out->add_trials() = FinishedTrial("6", "5000", 0.9);
  *earlier_out->add_trials() = FinishedTrial("7", "2.5", 0.9);
  v1::HyperparameterOutput extra = FinishedTrial("8", "80", 0.9);
  (*extra.mutable_hyperparameters())["y"] = "1";
  *earlier_out->add_trials() = extra;

  ReconcileResult r = h.Step();
  // The tuner saw the three completed trials that fit, as completed history.
  ASSERT_EQ(h.suggest_calls.size(), 1u);
  EXPECT_EQ(h.suggest_calls[0], (std::pair<size_t, int>(3, 2)));
  std::vector<std::string> ids;
  for (const tuner::TrialRecord& t : h.last_history) {
    ids.push_back(t.trial_id);
    EXPECT_EQ(t.status, tuner::TrialRecord::Status::kCompleted) << t.trial_id;
    ASSERT_TRUE(t.objective.has_value()) << t.trial_id;
    EXPECT_EQ(*t.objective, std::stoi(t.assignment.at("x")) == 10   ? 0.5
                            : std::stoi(t.assignment.at("x")) == 20 ? 0.7
                                                                    : 0.6);
  }
  EXPECT_THAT(ids, UnorderedElementsAre("earlier/1", "earlier/2", "earlier/3"));
  EXPECT_THAT(EventReasons(r), testing::Contains("StudyResumed"));
  for (const Action& a : r.actions) {
    if (auto* e = std::get_if<EmitEvent>(&a); e && e->reason == "StudyResumed") {
      EXPECT_THAT(e->message, HasSubstr("3 completed trials"));
      EXPECT_THAT(e->message, HasSubstr("3 left out"));
    }
  }
  // This job's own trials are numbered from 1 and are all it counts.
  const v1::TrainingOutput& out = h.job.status().training_output();
  ASSERT_EQ(out.trials_size(), 2);
  EXPECT_EQ(out.trials(0).trial_id(), "1");
  EXPECT_EQ(out.trials(1).trial_id(), "2");
  EXPECT_EQ(out.total_trial_count(), 2);
  EXPECT_EQ(out.completed_trial_count(), 0);

  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.1);
  Report(h, "2", 10, 0.2);
  h.Exit("mnist-t1-master-0", 0);
  h.Exit("mnist-t2-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::SUCCEEDED);
  EXPECT_EQ(h.job.status().training_output().completed_trial_count(), 2);
  EXPECT_EQ(h.job.status().training_output().total_trial_count(), 2);
  // The earlier trials were better, but the best trial reported is this job's.
  EXPECT_EQ(h.job.status().training_output().trials(0).trial_id(), "2");
  for (const auto& t : h.job.status().training_output().trials()) {
    EXPECT_THAT(t.trial_id(), testing::Not(HasSubstr("earlier")));
  }
}

TEST(ResumeTest, RealTunerNeverSuggestsAResumedPointAgain) {
  // A 5-point grid of which the earlier study ran 10, 20, 30: only 2 remain.
  v1::TrainingJob job = Resuming(5, 5);
  v1::HyperparameterSpec* hp =
      job.mutable_spec()->mutable_training_input()->mutable_hyperparameters();
  hp->set_algorithm(v1::HyperparameterSpec::GRID_SEARCH);
  v1::ParameterSpec* x = hp->mutable_params(0);
  x->set_type(v1::ParameterSpec::DISCRETE);
  x->clear_min_value();
  x->clear_max_value();
  for (double v : {10, 20, 30, 40, 50}) x->add_discrete_values(v);
  Harness h(job);
  h.options.tuner_factory = tuner::Tuner::Create;
  h.observed.previous_study = Earlier();
  h.Settle();
  std::vector<std::string> xs;
  for (const auto& t : h.job.status().training_output().trials()) {
    xs.push_back(t.hyperparameters().at("x"));
  }
  EXPECT_THAT(xs, UnorderedElementsAre("40", "50"));
}

TEST(ResumeTest, EarlyStoppingJudgesAgainstResumedTrialsToo) {
  v1::TrainingJob job = Resuming(1, 1);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_enable_trial_early_stopping(true);
  Harness h(job);
  h.observed.previous_study = Earlier();
  size_t completed_seen = 0;
  h.options.stop_rule = [&](const v1::HyperparameterSpec&, const tuner::TrialRecord&,
                            const std::vector<tuner::TrialRecord>& completed) {
    completed_seen = completed.size();
    return false;
  };
  h.Settle();
  h.RunAll();
  Report(h, "1", 5, 0.1);
  h.Settle();
  EXPECT_EQ(completed_seen, 3u);
}

// A halving study (HalvingStudy: rungs at reports 1, 2, 4) resuming
// `earlier`: whether its trial 1, with 0.55 as its first report (rung 0), is
// stopped there.
bool ResumedHalvingStopsAtRungZero(PreviousStudy earlier) {
  v1::TrainingJob job = HalvingStudy(2, 1);
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_hyperparameters()
      ->set_resume_previous_job_id("earlier");
  Harness h(job);
  h.observed.previous_study = std::move(earlier);
  h.Settle();
  h.RunAll();
  Report(h, "1", 10, 0.55);
  h.Settle();
  EXPECT_THAT(RungValues(*Trial(h, "1")), ElementsAre(0.55));
  return Trial(h, "1")->is_trial_stopped_early();
}

// Successive halving compares values at this job's rungs. The earlier study
// ran without halving: its trials' values at this job's rung 0 (their first
// report: 0.7, 0.5, 0.6) are read from their reports, so trial 1's 0.55 is
// not among the best 2 of 4 there.
TEST(ResumeTest, HalvingReadsEarlierTrialsAtThisJobsRungs) {
  EXPECT_TRUE(ResumedHalvingStopsAtRungZero(Earlier()));
}

// Under the same rungs the values the earlier study recorded stand, as this
// study's own do: trial 2 recorded 0.4 at rung 0 (trials 1 and 3 recorded
// none), so trial 1's 0.55 is the best of 2 there.
TEST(ResumeTest, HalvingKeepsWhatTheEarlierStudyRecordedAtTheSameRungs) {
  PreviousStudy earlier = Earlier();
  *earlier.job.mutable_spec()
       ->mutable_training_input()
       ->mutable_hyperparameters()
       ->mutable_early_stopping() =
      HalvingStudy(2, 1).spec().training_input().hyperparameters().early_stopping();
  v1::HyperparameterOutput* two =
      earlier.job.mutable_status()->mutable_training_output()->mutable_trials(0);
  ASSERT_EQ(two->trial_id(), "2");
  two->add_rung_metrics()->set_objective_value(0.4);
  EXPECT_FALSE(ResumedHalvingStopsAtRungZero(std::move(earlier)));
}

TEST(ResumeTest, UnusableEarlierStudyFailsTheJobBeforeAnyTrial) {
  struct Case {
    std::string name;
    std::function<void(PreviousStudy&, v1::TrainingJob&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"missing", [](PreviousStudy& p, v1::TrainingJob&) { p = PreviousStudy{}; },
       "no job 'earlier' found in namespace 'default'"},
      {"itself",
       [](PreviousStudy&, v1::TrainingJob& j) { j.mutable_metadata()->set_name("earlier"); },
       "names this job itself"},
      {"not_a_study",
       [](PreviousStudy& p, v1::TrainingJob&) {
         p.job.mutable_spec()->mutable_training_input()->clear_hyperparameters();
       },
       "job 'earlier' is not a hyperparameter tuning job"},
      {"running",
       [](PreviousStudy& p, v1::TrainingJob&) { p.job.mutable_status()->set_state(v1::RUNNING); },
       "job 'earlier' is RUNNING: only a finished study can be resumed"},
      {"other_goal",
       [](PreviousStudy& p, v1::TrainingJob&) {
         p.job.mutable_spec()->mutable_training_input()->mutable_hyperparameters()->set_goal(
             v1::HyperparameterSpec::MINIMIZE);
       },
       "job 'earlier' has goal MINIMIZE, this job MAXIMIZE"},
      {"other_tag",
       [](PreviousStudy& p, v1::TrainingJob&) {
         p.job.mutable_spec()
             ->mutable_training_input()
             ->mutable_hyperparameters()
             ->clear_hyperparameter_metric_tag();
       },
       "job 'earlier' has hyperparameterMetricTag 'training/hptuning/metric', this job "
       "'accuracy'"},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    v1::TrainingJob job = Resuming(4, 2);
    PreviousStudy previous = Earlier();
    tc.change(previous, job);
    Harness h(job);
    h.observed.previous_study = previous;
    ReconcileResult r = h.Step();
    EXPECT_EQ(h.job.status().state(), v1::FAILED);
    EXPECT_EQ(h.job.status().error_message(),
              "spec.trainingInput.hyperparameters.resumePreviousJobId: " + tc.message);
    EXPECT_THAT(Created(r), IsEmpty());
    EXPECT_THAT(EventReasons(r), ElementsAre("PreviousStudyUnusable"));
    EXPECT_TRUE(h.suggest_calls.empty());
    EXPECT_EQ(h.job.status().training_output().total_trial_count(), 0);
    h.Settle();  // and stays so, with nothing more to do
    EXPECT_EQ(h.job.status().state(), v1::FAILED);
  }
}

TEST(ResumeTest, AnEarlierJobDeletedMidStudyOnlyLeavesTheHistory) {
  Harness h(Resuming(3, 1));
  h.observed.previous_study = Earlier();
  h.Settle();
  h.RunAll();
  h.Settle();
  ASSERT_EQ(h.suggest_calls.size(), 1u);
  EXPECT_EQ(h.suggest_calls[0].first, 3u);
  h.observed.previous_study = PreviousStudy{};  // e.g. its TTL deleted it
  Report(h, "1", 10, 0.3);
  h.Exit("mnist-t1-master-0", 0);
  h.Settle();
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  ASSERT_EQ(h.suggest_calls.size(), 2u);
  EXPECT_EQ(h.suggest_calls[1].first, 1u);  // only this job's trial 1
  EXPECT_EQ(h.job.status().training_output().total_trial_count(), 2);
}

TEST(ReconcileTest, FailedPodWithoutContainerFailureIsPodLevel) {
  v1::TrainingJob job = Job();
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::ExitCode);
  Harness h = Running(job);
  ObservedReplica& w = h.Pod("mnist-worker-0");
  w.phase = ReplicaPhase::kFailed;
  w.exit_code = 0;
  w.reason = "Preempting";
  ReconcileResult r = h.Step();
  EXPECT_EQ(r.status.state(), v1::RUNNING);
  EXPECT_EQ(r.status.restart_count(), 1);
  EXPECT_THAT(Deleted(r), ElementsAre("mnist-worker-0"));
}

// Random walks through cluster events under every restart and clean-up
// policy: the backend contract holds at every step (nothing created twice,
// nothing deleted that is not there: Harness::Apply checks), the state never
// moves backwards, and every walk settles to a reconcile that does nothing.
TEST(ReconcileTest, RandomWalksKeepTheInvariants) {
  const v1::RunPolicy::RestartPolicy policies[] = {v1::RunPolicy::Never, v1::RunPolicy::OnFailure,
                                                   v1::RunPolicy::ExitCode, v1::RunPolicy::Always};
  const v1::RunPolicy::CleanPodPolicy cleans[] = {v1::RunPolicy::Running, v1::RunPolicy::All,
                                                  v1::RunPolicy::None};
  auto rank = [](v1::State s) {
    switch (s) {
      case v1::QUEUED:
        return 0;
      case v1::PREPARING:
        return 1;
      case v1::RUNNING:
        return 2;
      case v1::CANCELLING:
        return 3;
      default:
        return 4;
    }
  };
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    v1::TrainingJob job = seed % 9 == 0   ? PausingStudy(4, 2)
                          : seed % 3 == 0 ? Study(4, 2)
                                          : Job(2, 1);
    job.mutable_spec()->mutable_run_policy()->set_restart_policy(policies[seed % 4]);
    job.mutable_spec()->mutable_run_policy()->set_clean_pod_policy(cleans[seed % 3]);
    job.mutable_spec()->mutable_run_policy()->set_backoff_limit(4);
    job.mutable_spec()->mutable_run_policy()->set_active_deadline_seconds(3600);
    Harness h(job);
    h.slow_deletes = seed % 2 == 0;
    int last_rank = 0;
    for (int step = 0; step < 60 && !HasFatalFailure(); ++step) {
      if (!h.observed.replicas.empty()) {
        ObservedReplica& r = h.observed.replicas[rng() % h.observed.replicas.size()];
        switch (rng() % 9) {
          case 0:
          case 1:
          case 2:
            if (r.phase == ReplicaPhase::kPending) r.phase = ReplicaPhase::kRunning;
            break;
          case 3:
            r.phase = ReplicaPhase::kSucceeded;
            r.exit_code = 0;
            break;
          case 4:
            r.phase = ReplicaPhase::kFailed;
            r.exit_code = (rng() % 2) ? 1 : 137;
            break;
          case 5:
            r.node_lost = true;
            break;
          case 6:
            r.container_restarts += 1;
            break;
          case 7: {
            const std::string name = r.name;
            std::erase_if(h.observed.replicas, [&](const auto& o) { return o.name == name; });
            break;
          }
          default:
            Report(h, r.key.trial_id, step, (rng() % 100) / 100.0);
        }
      }
      if (rng() % 4 == 0) h.now += absl::Seconds(rng() % 120);
      if (rng() % 50 == 0) h.job.mutable_spec()->set_cancel(true);
      const v1::State before = h.job.status().state();
      h.Step();
      const v1::State after = h.job.status().state();
      EXPECT_GE(rank(after), last_rank)
          << v1::State_Name(before) << " -> " << v1::State_Name(after);
      if (IsTerminal(before)) {
        EXPECT_EQ(after, before);
      }
      last_rank = rank(after);
    }
    // Let time pass (backoffs, grace periods, the deadline), then settle.
    for (int i = 0; i < 4; ++i) {
      h.now += absl::Hours(1);
      h.Step();
    }
    h.Settle();
  }
}

TEST(KubeObjectsStudyTest, RenderJobShowsTheRequestedTrial) {
  Harness h(Study(5, 1));
  absl::StatusOr<std::vector<nlohmann::json>> objects = RenderJob(h.job, "ns", 2, h.options);
  ASSERT_TRUE(objects.ok()) << objects.status();
  ASSERT_EQ(objects->size(), 4u);  // master and worker, each a Service and a Pod
  const nlohmann::json& pod = (*objects)[1];
  EXPECT_EQ(pod["metadata"]["name"], "mnist-t2-master-0");
  EXPECT_EQ(pod["spec"]["containers"][0]["args"], nlohmann::json({"--x=2", "--job-dir", "/out/2"}));
  EXPECT_EQ(RenderJob(h.job, "ns", 0, h.options).status().code(),
            absl::StatusCode::kInvalidArgument);
  h.tuner_capacity = 1;
  EXPECT_EQ(RenderJob(h.job, "ns", 2, h.options).status().code(), absl::StatusCode::kOutOfRange);
}

// ---- Gang admission ----------------------------------------------------------

TEST(AdmissionGateTest, AQueuedJobCreatesNothingUntilAVerdictAdmitsItThenEverything) {
  Harness h(Job(2, 1));
  h.options.gang_admission = true;
  ReconcileResult r = h.Step();
  EXPECT_TRUE(Created(r).empty());
  EXPECT_EQ(h.job.status().state(), v1::QUEUED);
  const v1::Condition* admitted = h.Condition(kAdmittedCondition);
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ(admitted->status(), "False");
  EXPECT_EQ(admitted->reason(), kQueuedReason);
  h.Settle();
  EXPECT_TRUE(h.observed.replicas.empty());

  // The backend's verdict is written with the status.
  h.observed.admission = AdmissionVerdict{
      .reason = kWaitingForCapacityReason,
      .message = "needs 4 pods of cpu 1; the cluster can place 2 of them now; 1 job ahead of it",
      .position = 2};
  r = h.Step();
  EXPECT_TRUE(Created(r).empty());
  EXPECT_TRUE(r.status_changed);
  EXPECT_EQ(h.Condition(kAdmittedCondition)->reason(), kWaitingForCapacityReason);
  EXPECT_EQ(h.Condition(kAdmittedCondition)->message(), h.observed.admission->message);
  EXPECT_EQ(h.job.status().queue_position(), 2);
  EXPECT_TRUE(Events(r).empty());         // waiting for capacity is no news
  EXPECT_FALSE(h.Step().status_changed);  // written once

  h.observed.admission = AdmissionVerdict{.reason = kNeverFitsReason, .message = "too big"};
  r = h.Step();
  EXPECT_THAT(Events(r), testing::ElementsAre("Warning NeverFits: too big"));
  EXPECT_EQ(h.job.status().queue_position(), 0);

  // Admitted: the condition, the event and every pod in the same pass.
  h.observed.admission =
      AdmissionVerdict{.reason = kAdmittedReason, .message = "its 4 pods fit the cluster now"};
  r = h.Step();
  EXPECT_THAT(Created(r), testing::UnorderedElementsAre("mnist-master-0", "mnist-worker-0",
                                                        "mnist-worker-1", "mnist-ps-0"));
  EXPECT_EQ(h.Condition(kAdmittedCondition)->status(), "True");
  EXPECT_THAT(Events(r), testing::Contains("Normal Admitted: its 4 pods fit the cluster now"));
  // A later verdict never takes the admission back.
  h.observed.admission = AdmissionVerdict{.reason = kWaitingForCapacityReason, .message = "x"};
  h.Settle();
  EXPECT_EQ(h.Condition(kAdmittedCondition)->status(), "True");
  EXPECT_EQ(h.observed.replicas.size(), 4u);
}

TEST(AdmissionGateTest, ANewJobWaitsBrieflyForItsFirstVerdictWithoutAWrite) {
  v1::TrainingJob job = Job(1, 0);
  Harness h(job);
  h.job.mutable_metadata()->set_creation_timestamp(
      absl::FormatTime(absl::RFC3339_sec, h.now - absl::Seconds(1), absl::UTCTimeZone()));
  h.options.gang_admission = true;
  ReconcileResult r = h.Reconcile();
  EXPECT_FALSE(r.status_changed);
  EXPECT_TRUE(r.actions.empty());
  ASSERT_TRUE(r.requeue_after.has_value());
  EXPECT_EQ(*r.requeue_after, absl::Seconds(1));
  // The verdict comes in time: one write, with the pods (and no Admitted
  // event: the job never waited in the queue).
  h.observed.admission = AdmissionVerdict{.reason = kAdmittedReason, .message = "fits"};
  r = h.Reconcile();
  EXPECT_TRUE(r.status_changed);
  EXPECT_EQ(Created(r).size(), 2u);
  EXPECT_THAT(EventReasons(r), testing::Not(testing::Contains(kAdmittedReason)));
  EXPECT_EQ(h.job.status().state(), v1::QUEUED);  // PREPARING once its pods are seen
  EXPECT_EQ(h.Condition(kAdmittedCondition)->status(), "True");

  // None in time: the job says it is queued.
  Harness late(job);
  late.job.mutable_metadata()->set_creation_timestamp(
      absl::FormatTime(absl::RFC3339_sec, late.now - absl::Seconds(3), absl::UTCTimeZone()));
  late.options.gang_admission = true;
  r = late.Reconcile();
  EXPECT_TRUE(r.status_changed);
  EXPECT_EQ(late.Condition(kAdmittedCondition)->reason(), kQueuedReason);
}

TEST(AdmissionGateTest, AReplicaThatCannotBePlacedAgainReleasesTheWholeGang) {
  v1::TrainingJob job = Job(2, 1);
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  job.mutable_spec()
      ->mutable_run_policy()
      ->mutable_scheduling_policy()
      ->set_schedule_timeout_seconds(60);
  Harness h(job);
  h.options.gang_admission = true;
  h.observed.admission = AdmissionVerdict{.reason = kAdmittedReason, .message = "fits"};
  h.Settle();
  h.RunAll();
  h.Settle();
  ASSERT_EQ(h.job.status().state(), v1::RUNNING);
  h.observed.admission.reset();
  // A worker's node is gone: its pod is recreated, and no node takes it.
  h.Unplaceable("mnist-worker-1");
  h.now += absl::Seconds(30);
  ReconcileResult r = h.Step();
  EXPECT_TRUE(Deleted(r).empty());
  ASSERT_TRUE(r.requeue_after.has_value());
  EXPECT_LE(*r.requeue_after, absl::Seconds(30));  // woken when the timeout is due

  h.now += absl::Seconds(31);
  r = h.Step();
  EXPECT_THAT(Deleted(r), testing::UnorderedElementsAre("mnist-master-0", "mnist-worker-0",
                                                        "mnist-worker-1", "mnist-ps-0"));
  EXPECT_EQ(h.job.status().state(), v1::QUEUED);
  const v1::Condition* admitted = h.Condition(kAdmittedCondition);
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ(admitted->status(), "False");
  EXPECT_EQ(admitted->reason(), kGangReleasedReason);
  EXPECT_EQ(admitted->message(),
            "worker-1 could not be placed for 1m1s (0/3 nodes are available: 3 Insufficient "
            "cpu.): the whole gang was released, and the job waits to be admitted again");
  EXPECT_THAT(EventReasons(r), testing::Contains(kGangReleasedReason));
  // Nothing is created until admission lets it in again; then everything.
  h.Settle();
  EXPECT_TRUE(h.observed.replicas.empty());
  h.observed.admission = AdmissionVerdict{.reason = kAdmittedReason, .message = "fits again"};
  r = h.Step();
  EXPECT_EQ(Created(r).size(), 4u);
}

TEST(AdmissionGateTest, JobsAdmittedElsewhereOrStartedBeforeAreNotHeld) {
  v1::TrainingJob kueue = Job(1, 0);
  (*kueue.mutable_metadata()->mutable_labels())[kKueueQueueLabel] = "team-a";
  EXPECT_EQ(AdmittedElsewhere(kueue), "Kueue");
  Harness k(kueue);
  k.options.gang_admission = true;
  EXPECT_EQ(Created(k.Step()).size(), 2u);
  EXPECT_EQ(k.Condition(kAdmittedCondition), nullptr);

  v1::TrainingJob coscheduled = Job(1, 0);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"spec": {"schedulerName": "scheduler-plugins-scheduler"}})",
                  &(*coscheduled.mutable_spec()->mutable_replica_templates())["worker"])
                  .ok());
  EXPECT_EQ(AdmittedElsewhere(coscheduled), "scheduler scheduler-plugins-scheduler");
  v1::TrainingJob default_scheduler = Job(1, 0);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"spec": {"schedulerName": "default-scheduler"}})",
                  default_scheduler.mutable_spec()->mutable_template_())
                  .ok());
  EXPECT_EQ(AdmittedElsewhere(default_scheduler), "");

  // Running before admission was turned on: it goes on, nothing is deleted.
  Harness running(Job(1, 0));
  running.Settle();
  running.RunAll();
  running.Settle();
  ASSERT_EQ(running.job.status().state(), v1::RUNNING);
  running.options.gang_admission = true;
  ReconcileResult r = running.Step();
  EXPECT_TRUE(r.actions.empty());
  EXPECT_EQ(running.observed.replicas.size(), 2u);
}

TEST(AdmissionGateTest, AnAdmittedStudyStartsOnlyTheTrialsAdmissionLetsStart) {
  Harness h(Study(6, 3));
  h.options.gang_admission = true;
  h.Settle();
  EXPECT_TRUE(h.observed.replicas.empty());
  EXPECT_EQ(h.job.status().training_output().total_trial_count(), 0);

  // Admission admits the study with its first trial.
  auto admit = [&](int64_t trials) {
    h.observed.admission =
        AdmissionVerdict{.reason = kAdmittedReason, .message = "fits", .admitted_trials = trials};
  };
  admit(1);
  ReconcileResult r = h.Step();
  EXPECT_THAT(Events(r), testing::Contains("Normal Admitted: fits"));
  h.Settle();
  EXPECT_EQ(h.job.status().training_output().total_trial_count(), 1);
  EXPECT_EQ(h.job.status().admitted_trial_count(), 1);
  EXPECT_EQ(h.observed.replicas.size(), 2u);  // one trial: master and worker
  EXPECT_EQ(h.suggest_calls.size(), 1u);

  admit(3);  // two more fit
  r = h.Step();
  EXPECT_THAT(Events(r),
              testing::Contains("Normal TrialsAdmitted: 2 trials admitted: all of their replicas "
                                "can start now"));
  h.Settle();
  EXPECT_EQ(h.job.status().training_output().total_trial_count(), 3);
  EXPECT_EQ(h.observed.replicas.size(), 6u);
}

TEST(AdmissionGateTest, ATrialWhoseReplicaCannotBePlacedAgainIsReleasedAloneAndAdmittedAgain) {
  v1::TrainingJob study = Study(4, 2);
  study.mutable_spec()
      ->mutable_run_policy()
      ->mutable_scheduling_policy()
      ->set_schedule_timeout_seconds(60);
  Harness h(study);
  h.options.gang_admission = true;
  auto admit = [&](int64_t trials, std::vector<std::string> again = {}) {
    h.observed.admission = AdmissionVerdict{.reason = kAdmittedReason,
                                            .message = "fits",
                                            .admitted_trials = trials,
                                            .readmitted_trials = std::move(again)};
  };
  admit(2);
  h.Settle();
  h.RunAll();
  h.Settle();
  ASSERT_EQ(h.observed.replicas.size(), 4u);
  // (Each pass replaces the status: read it anew.)
  auto out = [&]() -> const v1::TrainingOutput& { return h.job.status().training_output(); };
  ASSERT_EQ(out().trials_size(), 2);
  ASSERT_EQ(out().trials(1).state(), v1::RUNNING);
  using Params = std::map<std::string, std::string>;
  auto params = [](const v1::HyperparameterOutput& t) {
    return Params(t.hyperparameters().begin(), t.hyperparameters().end());
  };
  const Params hyperparameters = params(out().trials(1));
  const size_t suggestions = h.suggest_calls.size();

  // Trial 2's worker lost its node: recreated, no node takes it.
  h.Unplaceable("mnist-t2-worker-0");
  h.now += absl::Seconds(30);
  ReconcileResult r = h.Step();
  EXPECT_TRUE(Deleted(r).empty());
  ASSERT_TRUE(r.requeue_after.has_value());
  EXPECT_LE(*r.requeue_after, absl::Seconds(30));

  h.now += absl::Seconds(31);
  r = h.Step();
  // Only trial 2's gang goes; trial 1 runs on.
  EXPECT_THAT(Deleted(r), UnorderedElementsAre("mnist-t2-master-0", "mnist-t2-worker-0"));
  EXPECT_THAT(Events(r), testing::Contains(
                             "Normal GangReleased: trial 2 worker-0 could not be placed for 1m1s "
                             "(0/3 nodes are available: 3 Insufficient cpu.): the trial's gang was "
                             "released, and it waits to be admitted again"));
  EXPECT_EQ(out().trials(0).state(), v1::RUNNING);
  EXPECT_EQ(out().trials(1).state(), v1::QUEUED);
  EXPECT_TRUE(out().trials(1).awaiting_admission());
  EXPECT_EQ(h.job.status().state(), v1::RUNNING);
  EXPECT_TRUE(h.ConditionTrue(kAdmittedCondition));

  // It holds its place among the parallel trials: nothing is created, no
  // third trial starts, until admission lets it in again.
  h.Settle();
  EXPECT_THAT(h.Names(), UnorderedElementsAre("mnist-t1-master-0", "mnist-t1-worker-0"));
  EXPECT_EQ(out().total_trial_count(), 2);
  admit(2, {"2"});
  r = h.Step();
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t2-master-0", "mnist-t2-worker-0"));
  EXPECT_THAT(Events(r), testing::Contains("Normal TrialsAdmitted: trial 2 admitted again: all of "
                                           "its replicas can start now"));
  EXPECT_FALSE(out().trials(1).awaiting_admission());
  // The same trial, with the same hyperparameters: the tuner was not asked.
  EXPECT_EQ(out().trials(1).trial_id(), "2");
  EXPECT_EQ(params(out().trials(1)), hyperparameters);
  EXPECT_EQ(h.suggest_calls.size(), suggestions);
  EXPECT_EQ(out().total_trial_count(), 2);
}

TEST(AdmissionGateTest, AReleasedTrialGoesOnWhenAdmissionIsTurnedOff) {
  v1::TrainingJob study = Study(2, 2);
  Harness h(study);
  h.options.gang_admission = true;
  h.observed.admission =
      AdmissionVerdict{.reason = kAdmittedReason, .message = "fits", .admitted_trials = 2};
  h.Settle();
  h.RunAll();
  h.Settle();
  h.Unplaceable("mnist-t1-worker-0", "no room");
  h.now += kDefaultScheduleTimeout;
  h.Settle();
  ASSERT_TRUE(h.job.status().training_output().trials(0).awaiting_admission());
  EXPECT_THAT(h.Names(), UnorderedElementsAre("mnist-t2-master-0", "mnist-t2-worker-0"));

  h.options.gang_admission = false;
  ReconcileResult r = h.Step();
  EXPECT_THAT(Created(r), UnorderedElementsAre("mnist-t1-master-0", "mnist-t1-worker-0"));
  EXPECT_FALSE(h.job.status().training_output().trials(0).awaiting_admission());
}

}  // namespace
}  // namespace kubetrain::core
