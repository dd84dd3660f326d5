#include "operator/core/admission_queue.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/core/kube_objects.h"

namespace kubetrain::core {
namespace {

const absl::Time kQueueNow = absl::FromUnixSeconds(1'800'000'000);

// `replicas` pods of one cpu, named after the job and trial.
std::vector<PodPlacement> OneCpuPods(const std::string& job, const std::string& trial,
                                     int replicas) {
  std::vector<PodPlacement> pods;
  for (int i = 0; i < replicas; ++i) {
    PodPlacement pod;
    pod.name = absl::StrCat(job, trial.empty() ? "" : "-t" + trial, "-", i);
    pod.ns = "ns1";
    pod.requests = {{"cpu", 1000}, {"pods", 1000}};
    pods.push_back(pod);
  }
  return pods;
}

v1::TrainingJob QueuedJob(const std::string& name, int created_second) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name(name);
  job.mutable_metadata()->set_namespace_("ns1");
  job.mutable_metadata()->set_uid("uid-" + name);
  job.mutable_metadata()->set_creation_timestamp(absl::FormatTime(
      absl::RFC3339_sec, kQueueNow - absl::Minutes(1) + absl::Seconds(created_second),
      absl::UTCTimeZone()));
  job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::BASIC);
  return job;
}

v1::TrainingJob QueuedStudy(const std::string& name, int max_trials, int parallel) {
  v1::TrainingJob job = QueuedJob(name, 0);
  v1::HyperparameterSpec* hp =
      job.mutable_spec()->mutable_training_input()->mutable_hyperparameters();
  hp->set_goal(v1::HyperparameterSpec::MAXIMIZE);
  hp->set_hyperparameter_metric_tag("accuracy");
  hp->set_max_trials(max_trials);
  hp->set_max_parallel_trials(parallel);
  v1::ParameterSpec* x = hp->add_params();
  x->set_parameter_name("x");
  x->set_type(v1::ParameterSpec::INTEGER);
  x->set_min_value(1);
  x->set_max_value(100);
  return job;
}

JobToAdmit Entry(const v1::TrainingJob& job, int replicas) {
  // By trial: what pods_of returns is borrowed until PlanJobs returns.
  auto pods = std::make_shared<std::map<std::string, std::vector<PodPlacement>>>();
  return {.key = "ns1/" + job.metadata().name(),
          .job = &job,
          .pods_of = [name = job.metadata().name(), replicas,
                      pods](const std::string& trial) -> const std::vector<PodPlacement>& {
            return (*pods)[trial] = OneCpuPods(name, trial, replicas);
          }};
}

ClusterState Cpus(int cpus) {
  NodeCapacity node;
  node.name = "n1";
  node.allocatable = {{"cpu", cpus * 1000}, {"pods", 110000}};
  return {{node}, {}, {}};
}

TEST(PlanJobsTest, TheFirstJobIsAdmittedTheSecondWaitsWithItsPosition) {
  const v1::TrainingJob a = QueuedJob("a", 0), b = QueuedJob("b", 1);
  auto verdicts = PlanJobs(Cpus(3), {Entry(b, 2), Entry(a, 2)}, kQueueNow);
  ASSERT_EQ(verdicts.size(), 2u);
  EXPECT_TRUE(verdicts["ns1/a"].admitted());
  EXPECT_EQ(verdicts["ns1/a"].position, 0);
  EXPECT_EQ(verdicts["ns1/b"].reason, kWaitingForCapacityReason);
  EXPECT_EQ(verdicts["ns1/b"].position, 1);
  EXPECT_FALSE(StatusShows(b.status(), verdicts["ns1/b"]));
}

TEST(PlanJobsTest, AnAdmissionNotYetWrittenKeepsItsRoom) {
  const v1::TrainingJob a = QueuedJob("a", 0), b = QueuedJob("b", 1);
  JobToAdmit pending = Entry(a, 2);
  pending.pending = AdmissionVerdict{.reason = kAdmittedReason, .message = "fits"};
  auto verdicts = PlanJobs(Cpus(3), {pending, Entry(b, 2)}, kQueueNow);
  // a still stands (its status does not show it yet), and b does not take
  // a's room.
  EXPECT_EQ(verdicts["ns1/a"], *pending.pending);
  EXPECT_EQ(verdicts["ns1/b"].reason, kWaitingForCapacityReason);
  // Written: nothing more to tell a; its pods (here not created) still count.
  v1::TrainingJob written = a;
  SetAdmittedCondition(written.mutable_status(), true, kAdmittedReason, "fits", kQueueNow);
  verdicts = PlanJobs(Cpus(3), {Entry(written, 2), Entry(b, 2)}, kQueueNow);
  EXPECT_EQ(verdicts.count("ns1/a"), 0u);
  EXPECT_EQ(verdicts["ns1/b"].reason, kWaitingForCapacityReason);
}

TEST(PlanJobsTest, AStudyIsAdmittedWithItsFirstTrialThenTrialByTrial) {
  v1::TrainingJob study = QueuedStudy("s", 6, 4);
  // Room for one and a half trials of two pods.
  auto verdicts = PlanJobs(Cpus(3), {Entry(study, 2)}, kQueueNow);
  ASSERT_TRUE(verdicts["ns1/s"].admitted());
  EXPECT_EQ(verdicts["ns1/s"].admitted_trials, 1);
  // Written, with its first trial started (its pods not yet bound): no
  // second trial fits beside it.
  SetAdmittedCondition(study.mutable_status(), true, kAdmittedReason, verdicts["ns1/s"].message,
                       kQueueNow);
  study.mutable_status()->set_state(v1::RUNNING);
  study.mutable_status()->set_admitted_trial_count(1);
  study.mutable_status()->mutable_training_output()->set_total_trial_count(1);
  v1::HyperparameterOutput* trial = study.mutable_status()->mutable_training_output()->add_trials();
  trial->set_trial_id("1");
  trial->set_state(v1::RUNNING);
  verdicts = PlanJobs(Cpus(3), {Entry(study, 2)}, kQueueNow);
  EXPECT_EQ(verdicts["ns1/s"].admitted_trials, 1);
  EXPECT_TRUE(StatusShows(study.status(), verdicts["ns1/s"]));
  // On room for two, a second trial is admitted.
  verdicts = PlanJobs(Cpus(4), {Entry(study, 2)}, kQueueNow);
  EXPECT_EQ(verdicts["ns1/s"].admitted_trials, 2);
  EXPECT_FALSE(StatusShows(study.status(), verdicts["ns1/s"]));
  // Not written yet: the next plan counts it (it does not admit a third
  // into the room the second will take).
  JobToAdmit entry = Entry(study, 2);
  entry.pending = verdicts["ns1/s"];
  verdicts = PlanJobs(Cpus(4), {entry}, kQueueNow);
  EXPECT_EQ(verdicts["ns1/s"].admitted_trials, 2);
}

// Trial 9's gang was released (a replica it lost could not be placed
// again); trial 8 runs, and a third parallel slot would start trial 10.
TEST(PlanJobsTest, AReleasedTrialIsAdmittedAgainBeforeANewOne) {
  v1::TrainingJob study = QueuedStudy("s", 12, 3);
  SetAdmittedCondition(study.mutable_status(), true, kAdmittedReason, "fits", kQueueNow);
  study.mutable_status()->set_state(v1::RUNNING);
  study.mutable_status()->set_admitted_trial_count(9);
  v1::TrainingOutput* out = study.mutable_status()->mutable_training_output();
  out->set_total_trial_count(9);
  v1::HyperparameterOutput* running = out->add_trials();
  running->set_trial_id("8");
  running->set_state(v1::RUNNING);
  v1::HyperparameterOutput* released = out->add_trials();
  released->set_trial_id("9");
  released->set_state(v1::QUEUED);
  released->set_awaiting_admission(true);
  auto plan = [&](int cpus, std::optional<AdmissionVerdict> pending = std::nullopt) {
    ClusterState cluster = Cpus(cpus);
    for (PodPlacement pod : OneCpuPods("s", "8", 2)) {
      pod.node = "n1";
      cluster.pods.push_back(pod);
    }
    JobToAdmit entry = Entry(study, 2);
    entry.pending = std::move(pending);
    return PlanJobs(cluster, {entry}, kQueueNow)["ns1/s"];
  };
  // Nothing free beside trial 8: it waits (the study stays admitted).
  AdmissionVerdict verdict = plan(2);
  EXPECT_TRUE(verdict.admitted());
  EXPECT_THAT(verdict.readmitted_trials, testing::IsEmpty());
  EXPECT_EQ(verdict.admitted_trials, 9);
  EXPECT_TRUE(StatusShows(study.status(), verdict));
  // Room for one trial: the released one, not the new one ("10" sorts first
  // as text).
  verdict = plan(4);
  EXPECT_THAT(verdict.readmitted_trials, testing::ElementsAre("9"));
  EXPECT_EQ(verdict.admitted_trials, 9);
  EXPECT_FALSE(StatusShows(study.status(), verdict));
  // Not written yet: its room stays taken, and it still stands.
  const AdmissionVerdict pending = verdict;
  verdict = plan(4, pending);
  EXPECT_THAT(verdict.readmitted_trials, testing::ElementsAre("9"));
  EXPECT_EQ(verdict.admitted_trials, 9);
  // Room for both.
  verdict = plan(6);
  EXPECT_THAT(verdict.readmitted_trials, testing::ElementsAre("9"));
  EXPECT_EQ(verdict.admitted_trials, 10);
  // Written: the trial no longer waits, and the status shows the verdict.
  released->set_awaiting_admission(false);
  EXPECT_TRUE(StatusShows(study.status(), pending));
}

TEST(PlanJobsTest, OnlyJobsAdmissionHoldsTakePart) {
  v1::TrainingJob job = QueuedJob("a", 0);
  EXPECT_TRUE(TakesPartInAdmission(job));
  job.mutable_spec()->mutable_run_policy()->set_suspend(true);
  EXPECT_FALSE(TakesPartInAdmission(job));
  job = QueuedJob("a", 0);
  (*job.mutable_metadata()->mutable_labels())[kKueueQueueLabel] = "team";
  EXPECT_FALSE(TakesPartInAdmission(job));
  job = QueuedJob("a", 0);
  job.mutable_status()->set_state(v1::SUCCEEDED);
  EXPECT_FALSE(TakesPartInAdmission(job));
  job.mutable_status()->set_state(v1::PREPARING);  // its pods not yet bound keep their room
  EXPECT_TRUE(TakesPartInAdmission(job));
  job.mutable_status()->set_state(v1::RUNNING);  // all of them bound
  EXPECT_FALSE(TakesPartInAdmission(job));
  v1::TrainingJob study = QueuedStudy("s", 4, 2);
  study.mutable_status()->set_state(v1::RUNNING);  // its trials come one gang at a time
  EXPECT_TRUE(TakesPartInAdmission(study));
}

// GangPlacements renders one pod per role: what placement reads must be what
// rendering every replica gives, whatever differs between roles.
TEST(GangPlacementsTest, EqualRenderingEveryReplica) {
  const char* jobs[] = {
      R"({"metadata": {"name": "std", "namespace": "ns1", "uid": "u1"},
          "spec": {"trainingInput": {"scaleTier": "STANDARD_1"}}})",
      R"({"metadata": {"name": "custom", "namespace": "ns1", "uid": "u2"},
          "spec": {"trainingInput": {"scaleTier": "CUSTOM", "masterType": "complex_model_m",
                                     "workerType": "standard_gpu", "workerCount": 3,
                                     "parameterServerType": "large_model",
                                     "parameterServerCount": 2, "useChiefInTfConfig": true,
                                     "workerConfig": {"acceleratorConfig":
                                         {"count": 2, "type": "NVIDIA_TESLA_T4"}}},
                   "replicaTemplates": {"ps": {"spec": {
                       "nodeSelector": {"pool": "ps"},
                       "tolerations": [{"key": "ps", "operator": "Exists"}]}}},
                   "template": {"spec": {"priorityClassName": "high"}}}})",
      R"({"metadata": {"name": "sweep", "namespace": "ns1", "uid": "u3"},
          "spec": {"trainingInput": {"scaleTier": "STANDARD_1",
                   "hyperparameters": {"goal": "MAXIMIZE", "hyperparameterMetricTag": "accuracy",
                                       "maxTrials": 4, "maxParallelTrials": 2,
                                       "params": [{"parameterName": "x", "type": "INTEGER",
                                                   "minValue": 1, "maxValue": 9}]}}}})",
  };
  ReconcileOptions options;
  options.address = KubernetesAddresses("ns1");
  options.gang_admission = true;
  for (const char* text : jobs) {
    v1::TrainingJob job;
    ASSERT_THAT(api::DecodeMessage(text, &job), ::testing::IsEmpty()) << text;
    const std::string trial = job.metadata().name() == "sweep" ? "2" : "";
    std::vector<absl::Status> errors;
    const std::vector<PodPlacement> placements =
        GangPlacements(job, "ns1", trial, options, &errors);
    EXPECT_THAT(errors, ::testing::IsEmpty());
    const std::vector<DesiredReplica> replicas = DesiredReplicas(job, trial, {}, options);
    ASSERT_EQ(placements.size(), replicas.size()) << job.metadata().name();
    for (size_t i = 0; i < replicas.size(); ++i) {
      absl::StatusOr<PodPlacement> rendered = ParsePodPlacement(RenderPod(job, "ns1", replicas[i]));
      ASSERT_TRUE(rendered.ok()) << rendered.status();
      const PodPlacement& got = placements[i];
      EXPECT_EQ(got.name, rendered->name);
      EXPECT_EQ(got.ns, "ns1");
      EXPECT_EQ(got.requests, rendered->requests) << got.name;
      EXPECT_EQ(got.node_selector, rendered->node_selector) << got.name;
      EXPECT_EQ(got.tolerations.size(), rendered->tolerations.size()) << got.name;
      EXPECT_EQ(got.required_terms.size(), rendered->required_terms.size()) << got.name;
      EXPECT_EQ(got.priority_class, rendered->priority_class) << got.name;
    }
  }
}

}  // namespace
}  // namespace kubetrain::core
