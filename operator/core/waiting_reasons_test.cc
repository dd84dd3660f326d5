#include "operator/core/waiting_reasons.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/core/kube_objects.h"
#include "operator/core/reconciler.h"

namespace kubetrain::core {
namespace {

using nlohmann::json;
using testing::ElementsAre;
using testing::IsEmpty;

// ---- Pods as the kubelet and the scheduler leave them -----------------------

json Unschedulable(const std::string& message) {
  return {{"phase", "Pending"},
          {"conditions",
           {{{"type", "PodScheduled"},
             {"status", "False"},
             {"reason", "Unschedulable"},
             {"message", message}}}}};
}

json Waiting(const std::string& reason, const std::string& message,
             const std::string& image = "example/trainer:1", json last_state = json::object()) {
  json container = {{"name", "kubetrain"},
                    {"image", image},
                    {"restartCount", 0},
                    {"state", {{"waiting", {{"reason", reason}, {"message", message}}}}},
                    {"lastState", last_state}};
  return {{"phase", "Pending"},
          {"conditions", {{{"type", "PodScheduled"}, {"status", "True"}}}},
          {"containerStatuses", {container}}};
}

json CrashLooping(int restarts, const std::string& backoff, int exit_code,
                  const std::string& message) {
  json status = Waiting(
      "CrashLoopBackOff", "back-off " + backoff + " restarting failed container=kubetrain",
      "example/trainer:1", {{"terminated", {{"exitCode", exit_code}, {"message", message}}}});
  status["phase"] = "Running";
  status["containerStatuses"][0]["restartCount"] = restarts;
  return status;
}

json RunningStatus() {
  return {{"phase", "Running"},
          {"conditions", {{{"type", "PodScheduled"}, {"status", "True"}}}},
          {"containerStatuses",
           {{{"name", "kubetrain"},
             {"image", "example/trainer:1"},
             {"restartCount", 0},
             {"state", {{"running", {{"startedAt", "2027-01-15T08:00:00Z"}}}}}}}}};
}

json Pod(json status) { return {{"metadata", {{"name", "p"}}}, {"status", std::move(status)}}; }

TEST(ReadPodWaitingTest, ReadsTheSchedulersAndTheKubeletsCauses) {
  std::optional<ReplicaWaiting> w = ReadPodWaiting(
      Pod(Unschedulable("0/1 nodes are available: 1 Insufficient cpu.")), kContainerName);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->reason, "Unschedulable");
  EXPECT_EQ(w->message, "0/1 nodes are available: 1 Insufficient cpu.");
  EXPECT_EQ(w->container, "");

  w = ReadPodWaiting(Pod(Waiting("ErrImagePull", "not found", "example/nope:1")), kContainerName);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->reason, "ErrImagePull");
  EXPECT_EQ(w->image, "example/nope:1");
  EXPECT_EQ(w->container, "");  // the training container is not named

  w = ReadPodWaiting(Pod(CrashLooping(3, "40s", 2, "bad flag")), kContainerName);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->reason, "CrashLoopBackOff");
  EXPECT_EQ(w->last_exit_code, 2);
  EXPECT_EQ(w->last_termination_message, "bad flag");

  // An init container blocks the pod: it is the one named.
  json init = Waiting("PodInitializing", "");
  init["initContainerStatuses"] = {{{"name", "fetch-data"},
                                    {"image", "busybox"},
                                    {"state",
                                     {{"waiting",
                                       {{"reason", "CreateContainerConfigError"},
                                        {"message", "configmap \"data\" not found"}}}}}}};
  w = ReadPodWaiting(Pod(init), kContainerName);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->reason, "CreateContainerConfigError");
  EXPECT_EQ(w->container, "fetch-data");
  EXPECT_TRUE(w->init_container);
}

TEST(ReadPodWaitingTest, OrdinaryProgressAndOddPodsAreNotCauses) {
  for (const json& status : {
           json(),                                               // just created
           json{{"phase", "Pending"}},                           // not scheduled yet
           Waiting("ContainerCreating", ""),                     // on its way
           Waiting("PodInitializing", ""),                       //
           RunningStatus(),                                      //
           json{{"phase", "Succeeded"}},                         //
           json{{"phase", "Pending"}, {"conditions", "oops"}},   // malformed
           json{{"phase", "Pending"}, {"containerStatuses", 3}}  //
       }) {
    json pod = {{"metadata", {{"name", "p"}}}};
    if (!status.is_null()) pod["status"] = status;
    EXPECT_FALSE(ReadPodWaiting(pod, kContainerName).has_value()) << status.dump();
  }
}

// ---- The condition and its events, through Reconcile --------------------------

// A job on a cluster without a kubelet: pods are the JSON objects the
// operator renders, read back with ParsePod; tests set their status.
struct Cluster {
  v1::TrainingJob job;
  std::map<std::string, json> pods;
  std::vector<ObservedService> services;
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  ReconcileOptions options;

  explicit Cluster(v1::TrainingJob j) : job(std::move(j)) {
    options.address = KubernetesAddresses("default");
    options.tuner_factory = [](const v1::HyperparameterSpec& spec, uint64_t seed) {
      return tuner::Tuner::Create(spec, seed);
    };
    options.stop_rule = [](const v1::HyperparameterSpec&, const tuner::TrialRecord&,
                           const std::vector<tuner::TrialRecord>&) { return false; };
  }

  ReconcileResult Step() {
    Observed observed;
    observed.services = services;
    for (const auto& [name, pod] : pods) {
      absl::StatusOr<ObservedReplica> replica = ParsePod(pod);
      EXPECT_TRUE(replica.ok()) << replica.status();
      if (replica.ok()) observed.replicas.push_back(*replica);
    }
    ReconcileResult r = Reconcile(job, observed, now, options);
    *job.mutable_status() = r.status;
    for (const Action& a : r.actions) {
      if (auto* c = std::get_if<CreateReplica>(&a)) {
        json pod = RenderPod(job, "default", c->replica);
        pod["metadata"]["creationTimestamp"] = "2027-01-15T08:00:00Z";
        pod["status"] = {{"phase", "Pending"}};
        pods[c->replica.name] = pod;
      } else if (auto* s = std::get_if<CreateService>(&a)) {
        services.push_back({s->replica.name, s->replica.key});
      } else if (auto* d = std::get_if<DeleteReplica>(&a)) {
        pods.erase(d->name);
      } else if (auto* ds = std::get_if<DeleteService>(&a)) {
        std::erase_if(services, [&](const ObservedService& x) { return x.name == ds->name; });
      }
    }
    return r;
  }
  void SetStatus(const std::string& pod, json status) {
    ASSERT_TRUE(pods.count(pod) > 0) << pod;
    pods[pod]["status"] = std::move(status);
  }
  const v1::Condition* Waiting() const {
    for (const v1::Condition& c : job.status().conditions()) {
      if (c.type() == kReplicasWaitingCondition) return &c;
    }
    return nullptr;
  }
};

// Warning events other than Restarting (a restart in place has its own
// event per restart: reconciler_test.cc).
std::vector<std::string> Warnings(const ReconcileResult& r) {
  std::vector<std::string> out;
  for (const Action& a : r.actions) {
    if (auto* e = std::get_if<EmitEvent>(&a);
        e && e->type == EmitEvent::Type::kWarning && e->reason != "Restarting") {
      out.push_back(e->reason + ": " + e->message);
    }
  }
  return out;
}

// master + 2 workers, restarted in place on failure (so a crash loop is the
// kubelet's until backoffLimit).
v1::TrainingJob OnFailureJob() {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("mnist");
  job.mutable_metadata()->set_namespace_("default");
  job.mutable_metadata()->set_uid("uid-1");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_scale_tier(v1::TrainingInput::CUSTOM);
  input->set_master_type("standard");
  input->set_worker_type("standard");
  input->set_worker_count(2);
  job.mutable_spec()->mutable_run_policy()->set_restart_policy(v1::RunPolicy::OnFailure);
  job.mutable_spec()->mutable_run_policy()->set_backoff_limit(10);
  return job;
}

// A job whose replicas all exist, Pending: PREPARING.
Cluster Prepared(v1::TrainingJob job = OnFailureJob()) {
  Cluster c(std::move(job));
  c.Step();
  c.Step();
  EXPECT_EQ(c.job.status().state(), v1::PREPARING);
  EXPECT_EQ(c.pods.size(), 3u);
  return c;
}

struct WaitingCase {
  std::string name;
  json status;  // of mnist-master-0
  std::string reason;
  std::string message;
};

TEST(WaitingConditionTest, EachCauseNamesTheReplicaOnceAndClearsWhenItRuns) {
  const std::vector<WaitingCase> cases = {
      {"Unschedulable", Unschedulable("0/1 nodes are available: 1 Insufficient cpu."),
       "Unschedulable",
       "master-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu."},
      {"ErrImagePull",
       Waiting("ErrImagePull",
               "rpc error: code = NotFound desc = failed to pull and unpack image "
               "\"docker.io/example/trainer:nope\": not found",
               "example/trainer:nope"),
       "ErrImagePull",
       "master-0 cannot pull image \"example/trainer:nope\" (ErrImagePull): rpc error: code = "
       "NotFound desc = failed to pull and unpack image \"docker.io/example/trainer:nope\": not "
       "found"},
      {"ImagePullBackOff",
       Waiting("ImagePullBackOff", "Back-off pulling image \"example/trainer:nope\"",
               "example/trainer:nope"),
       "ImagePullBackOff",
       "master-0 cannot pull image \"example/trainer:nope\" (ImagePullBackOff): Back-off pulling "
       "image \"example/trainer:nope\""},
      {"CreateContainerConfigError",
       Waiting("CreateContainerConfigError", "secret \"gcs-credentials\" not found"),
       "CreateContainerConfigError",
       "master-0 cannot start (CreateContainerConfigError): secret \"gcs-credentials\" not found"},
      {"CrashLoopBackOff", CrashLooping(2, "20s", 1, "ValueError: --learning_rate must be > 0\n"),
       "CrashLoopBackOff",
       "master-0 keeps crashing (CrashLoopBackOff), last exit code 1: ValueError: "
       "--learning_rate must be > 0"},
  };
  for (const WaitingCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    Cluster c = Prepared();
    EXPECT_EQ(c.Waiting(), nullptr);  // Pending with no cause: nothing to say

    c.SetStatus("mnist-master-0", tc.status);
    ReconcileResult r = c.Step();
    ASSERT_NE(c.Waiting(), nullptr);
    EXPECT_EQ(c.Waiting()->status(), "True");
    EXPECT_EQ(c.Waiting()->reason(), tc.reason);
    EXPECT_EQ(c.Waiting()->message(), tc.message);
    EXPECT_THAT(Warnings(r), ElementsAre(tc.reason + ": " + tc.message));
    EXPECT_EQ(c.job.status().state(), v1::PREPARING);

    // Not one event per sync.
    r = c.Step();
    EXPECT_THAT(Warnings(r), IsEmpty());
    EXPECT_TRUE(r.actions.empty());
    EXPECT_FALSE(r.status_changed);

    // Running: cleared (False, so `kubectl describe` shows when it ended).
    for (auto& [name, pod] : c.pods) c.SetStatus(name, RunningStatus());
    r = c.Step();
    EXPECT_EQ(c.job.status().state(), v1::RUNNING);
    ASSERT_NE(c.Waiting(), nullptr);
    EXPECT_EQ(c.Waiting()->status(), "False");
    EXPECT_EQ(c.Waiting()->message(), "");
    EXPECT_THAT(Warnings(r), IsEmpty());
    r = c.Step();
    EXPECT_TRUE(r.actions.empty());
    EXPECT_FALSE(r.status_changed);
  }
}

TEST(WaitingConditionTest, TheKubeletsRetriesAreOneCause) {
  Cluster c = Prepared();
  // The kubelet alternates ErrImagePull and ImagePullBackOff while it retries.
  c.SetStatus("mnist-master-0", Waiting("ErrImagePull", "not found", "example/nope:1"));
  EXPECT_EQ(Warnings(c.Step()).size(), 1u);
  c.SetStatus("mnist-master-0",
              Waiting("ImagePullBackOff", "Back-off pulling image", "example/nope:1"));
  ReconcileResult r = c.Step();
  EXPECT_THAT(Warnings(r), IsEmpty());
  EXPECT_EQ(c.Waiting()->reason(), "ImagePullBackOff");  // the condition follows the pod
  c.SetStatus("mnist-master-0", Waiting("ErrImagePull", "not found", "example/nope:1"));
  EXPECT_THAT(Warnings(c.Step()), IsEmpty());

  // A crash loop's back-off grows with each restart: the same crash.
  Cluster d = Prepared();
  d.SetStatus("mnist-master-0", CrashLooping(1, "10s", 1, "boom"));
  EXPECT_EQ(Warnings(d.Step()).size(), 1u);
  d.SetStatus("mnist-master-0", CrashLooping(2, "20s", 1, "boom"));
  EXPECT_THAT(Warnings(d.Step()), IsEmpty());
  // Another exit is another cause.
  d.SetStatus("mnist-master-0", CrashLooping(3, "40s", 137, "OOMKilled"));
  r = d.Step();
  EXPECT_THAT(Warnings(r),
              ElementsAre("CrashLoopBackOff: master-0 keeps crashing (CrashLoopBackOff), last "
                          "exit code 137: OOMKilled"));
}

TEST(WaitingConditionTest, ReplicasWithOneCauseShareOneEntry) {
  Cluster c = Prepared();
  const std::string no_cpu = "0/1 nodes are available: 1 Insufficient cpu.";
  c.SetStatus("mnist-worker-1", Unschedulable(no_cpu));
  c.SetStatus("mnist-worker-0", Unschedulable(no_cpu));
  ReconcileResult r = c.Step();
  EXPECT_EQ(c.Waiting()->message(), "worker-0, worker-1 cannot be scheduled: " + no_cpu);
  EXPECT_EQ(Warnings(r).size(), 1u);

  // The master's own cause comes first (slot order) and is new; the
  // workers' is not reported again.
  c.SetStatus("mnist-master-0",
              Waiting("CreateContainerConfigError", "configmap \"hparams\" not found"));
  r = c.Step();
  EXPECT_EQ(c.Waiting()->reason(), "CreateContainerConfigError");
  EXPECT_EQ(c.Waiting()->message(),
            "master-0 cannot start (CreateContainerConfigError): configmap \"hparams\" not found; "
            "worker-0, worker-1 cannot be scheduled: " +
                no_cpu);
  EXPECT_THAT(Warnings(r), ElementsAre("CreateContainerConfigError: master-0 cannot start "
                                       "(CreateContainerConfigError): configmap \"hparams\" not "
                                       "found"));
  EXPECT_THAT(Warnings(c.Step()), IsEmpty());

  // One worker scheduled: the entry shrinks, no event.
  c.SetStatus("mnist-worker-0", RunningStatus());
  r = c.Step();
  EXPECT_EQ(c.Waiting()->message(),
            "master-0 cannot start (CreateContainerConfigError): configmap \"hparams\" not found; "
            "worker-1 cannot be scheduled: " +
                no_cpu);
  EXPECT_THAT(Warnings(r), IsEmpty());
}

TEST(WaitingConditionTest, MaxWaitTimeNamesTheLastWaitingReason) {
  v1::TrainingJob job = OnFailureJob();
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_scheduling()
      ->mutable_max_wait_time()
      ->set_seconds(600);
  Cluster c = Prepared(job);
  c.SetStatus("mnist-master-0", Unschedulable("0/1 nodes are available: 1 Insufficient cpu."));
  c.Step();
  c.now += absl::Minutes(10);
  ReconcileResult r = c.Step();
  EXPECT_EQ(c.job.status().state(), v1::FAILED);
  EXPECT_EQ(c.job.status().error_message(),
            "scheduling.maxWaitTime 10m exceeded before the job started running; last waiting "
            "reason Unschedulable: master-0 cannot be scheduled: 0/1 nodes are available: 1 "
            "Insufficient cpu.");
  // Over: nothing waits any more.
  EXPECT_EQ(c.Waiting()->status(), "False");
  EXPECT_EQ(c.Waiting()->reason(), "FAILED");
  EXPECT_THAT(Warnings(r), ElementsAre(testing::StartsWith("MaxWaitTimeExceeded: ")));
}

TEST(WaitingConditionTest, MaxWaitTimeWithoutACauseSaysWhatItSaidBefore) {
  v1::TrainingJob job = OnFailureJob();
  job.mutable_spec()
      ->mutable_training_input()
      ->mutable_scheduling()
      ->mutable_max_wait_time()
      ->set_seconds(600);
  Cluster c = Prepared(job);
  c.now += absl::Minutes(10);
  c.Step();
  EXPECT_EQ(c.job.status().error_message(),
            "scheduling.maxWaitTime 10m exceeded before the job started running");
}

TEST(WaitingConditionTest, CancelAndSuspendClearIt) {
  Cluster c = Prepared();
  c.SetStatus("mnist-master-0", Unschedulable("0/1 nodes are available."));
  c.Step();
  ASSERT_EQ(c.Waiting()->status(), "True");
  Cluster s = c;
  s.job.mutable_spec()->mutable_run_policy()->set_suspend(true);
  s.Step();
  EXPECT_EQ(s.Waiting()->status(), "False");
  EXPECT_EQ(s.Waiting()->reason(), "JobSuspended");

  c.job.mutable_spec()->set_cancel(true);
  ReconcileResult r = c.Step();
  EXPECT_EQ(c.job.status().state(), v1::CANCELLING);
  EXPECT_EQ(c.Waiting()->status(), "False");
  EXPECT_THAT(Warnings(r), IsEmpty());
}

TEST(WaitingConditionTest, ATrialsReplicasAreNamedWithTheTrial) {
  v1::TrainingJob job = OnFailureJob();
  job.mutable_spec()->mutable_training_input()->clear_worker_type();
  job.mutable_spec()->mutable_training_input()->clear_worker_count();
  v1::HyperparameterSpec* hp =
      job.mutable_spec()->mutable_training_input()->mutable_hyperparameters();
  hp->set_max_trials(4);
  hp->set_max_parallel_trials(2);
  v1::ParameterSpec* p = hp->add_params();
  p->set_parameter_name("lr");
  p->set_type(v1::ParameterSpec::DOUBLE);
  p->set_min_value(0.001);
  p->set_max_value(0.1);
  Cluster c(job);
  c.Step();
  c.Step();
  ASSERT_EQ(c.pods.size(), 2u);
  c.SetStatus("mnist-t2-master-0", Waiting("ErrImagePull", "denied", "example/private:1"));
  ReconcileResult r = c.Step();
  EXPECT_EQ(c.Waiting()->message(),
            "trial 2 master-0 cannot pull image \"example/private:1\" (ErrImagePull): denied");
  EXPECT_EQ(Warnings(r).size(), 1u);
}

TEST(SummarizeWaitingTest, ListsAFewCausesAndCountsTheRest) {
  std::vector<WaitingReplica> replicas;
  for (int i = 0; i < 5; ++i) {
    ReplicaWaiting w;
    w.reason = "CreateContainerConfigError";
    w.message = "secret \"s" + std::to_string(i) + "\" not found";
    replicas.push_back({"worker-" + std::to_string(i), w});
  }
  WaitingSummary summary = SummarizeWaiting(replicas, "");
  EXPECT_EQ(summary.new_causes.size(), kMaxWaitingCauses);
  EXPECT_THAT(summary.message, testing::EndsWith("; and 2 more causes"));
  // Long messages are clipped, so every listed cause fits the condition.
  replicas[0].waiting.message = std::string(5000, 'x');
  summary = SummarizeWaiting(replicas, "");
  EXPECT_LT(summary.message.size(), 1024u);
  // What the condition already says is not new.
  EXPECT_THAT(SummarizeWaiting(replicas, summary.message).new_causes, IsEmpty());
}

TEST(SummarizeWaitingTest, ARefusedPodIsToldInTheServersWordsAndOnce) {
  ReplicaWaiting refused;
  refused.reason = kFailedCreateReason;
  // The pod's own name is left out: the replica's says it.
  refused.message =
      "pods \"mnist-master-0\" is forbidden: violates PodSecurity \"restricted:latest\": "
      "runAsUser=0 (pod must not set runAsUser=0)";
  WaitingSummary summary = SummarizeWaiting({{"master-0", refused}}, "");
  EXPECT_EQ(summary.reason, "FailedCreate");
  EXPECT_EQ(summary.message,
            "master-0 cannot be created: violates PodSecurity \"restricted:latest\": runAsUser=0 "
            "(pod must not set runAsUser=0)");

  // The longest refusal beside two long causes: whole causes only, under the
  // status's limit, and none told again at the next reconcile.
  refused.message = "pods \"mnist-master-0\" is forbidden: " + std::string(700, 'r');
  std::vector<WaitingReplica> replicas = {{"master-0", refused}};
  for (int i = 0; i < 2; ++i) {
    ReplicaWaiting w;
    w.reason = "CreateContainerConfigError";
    w.message = std::string(400, static_cast<char>('a' + i));
    replicas.push_back({"worker-" + std::to_string(i), w});
  }
  summary = SummarizeWaiting(replicas, "");
  EXPECT_LE(summary.message.size(), 1024u);
  EXPECT_THAT(summary.message, testing::StartsWith("master-0 cannot be created: rrr"));
  EXPECT_THAT(summary.message, testing::EndsWith("...; and 2 more causes"));
  EXPECT_EQ(summary.new_causes.size(), 1u);
  EXPECT_THAT(SummarizeWaiting(replicas, summary.message).new_causes, IsEmpty());
}

}  // namespace
}  // namespace kubetrain::core
