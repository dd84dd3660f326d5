#include "api/kubeflow.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_replace.h"
#include "api/codec.h"
#include "api/job_file.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace kubetrain::api {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Fixture(const std::string& name) {
  absl::StatusOr<std::string> text =
      ReadTextFile(std::string(KUBETRAIN_SOURCE_DIR) + "/api/testdata/kubeflow/" + name);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

// The converted job, checked as every entry point checks it.
CheckedJob Check(const std::string& text) { return CheckTrainingJob(text); }

nlohmann::json Template(const v1::TrainingJob& job, const std::string& role) {
  auto it = job.spec().replica_templates().find(role);
  if (it == job.spec().replica_templates().end()) return nullptr;
  std::string text;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(it->second, &text).ok());
  return nlohmann::json::parse(text);
}

std::vector<std::string> Mapped(const CheckedJob& checked) {
  std::vector<std::string> lines;
  for (const MappedField& m : checked.mapped) lines.push_back(m.from + " -> " + m.to);
  return lines;
}

std::vector<std::string> Errors(const std::vector<FieldError>& errors) {
  std::vector<std::string> lines;
  for (const FieldError& e : errors) lines.push_back(e.ToString());
  return lines;
}

std::vector<std::string> Strings(const google::protobuf::RepeatedPtrField<std::string>& list) {
  return {list.begin(), list.end()};
}

TEST(KubeflowTest, ParameterServersAndWorkers) {
  CheckedJob checked = Check(Fixture("tf-ps-worker.yaml"));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  EXPECT_EQ(checked.kubeflow_kind, "TFJob");
  const v1::TrainingJob& job = checked.job;
  EXPECT_EQ(job.api_version(), "kubetrain.io/v1");
  EXPECT_EQ(job.kind(), "TrainingJob");
  EXPECT_EQ(job.metadata().name(), "dist-mnist");
  EXPECT_EQ(job.metadata().namespace_(), "kubeflow");
  EXPECT_EQ(job.metadata().labels().at("team"), "vision");
  const v1::TrainingInput& input = job.spec().training_input();
  EXPECT_EQ(input.scale_tier(), v1::TrainingInput::CUSTOM);
  EXPECT_EQ(input.framework(), v1::TrainingInput::TENSORFLOW);
  // No chief: worker 0 is the master, TensorFlow's chief.
  EXPECT_TRUE(input.use_chief_in_tf_config());
  EXPECT_EQ(input.master_type(), "pod-template");
  EXPECT_EQ(input.worker_count(), 3);
  EXPECT_EQ(input.parameter_server_count(), 2);
  EXPECT_FALSE(input.has_evaluator_count());
  for (const v1::ReplicaConfig* config :
       {&input.master_config(), &input.worker_config(), &input.parameter_server_config()}) {
    EXPECT_EQ(config->image_uri(), "kubeflow/tf-dist-mnist-test:1.0");
    EXPECT_EQ(Strings(config->container_command()),
              (std::vector<std::string>{"python", "/var/tf_dist_mnist/dist_mnist.py"}));
    EXPECT_EQ(Strings(config->container_args()), (std::vector<std::string>{"--train_steps=2000"}));
  }
  EXPECT_EQ(job.spec().port(), 2222);
  EXPECT_EQ(job.spec().run_policy().restart_policy(), v1::RunPolicy::Never);
  EXPECT_EQ(job.spec().run_policy().clean_pod_policy(), v1::RunPolicy::None);
  EXPECT_FALSE(job.spec().run_policy().has_backoff_limit());
  // The worker template (and so worker 0's, the master's): what is not in
  // the ReplicaConfig.
  const nlohmann::json worker = nlohmann::json::parse(R"({
      "metadata": {"annotations": {"sidecar.istio.io/inject": "false"}},
      "spec": {"containers": [{"name": "kubetrain", "resources": {
          "requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}}]}})");
  EXPECT_EQ(Template(job, "worker"), worker);
  EXPECT_EQ(Template(job, "master"), worker);
  // The ps template held nothing else: no entry.
  EXPECT_EQ(Template(job, "ps"), nullptr);
  EXPECT_THAT(Mapped(checked), Contains("kind -> spec.trainingInput.framework: TENSORFLOW"));
  EXPECT_THAT(Mapped(checked), Contains("spec.tfReplicaSpecs.PS.replicas -> "
                                        "spec.trainingInput.parameterServerCount: 2"));
  EXPECT_THAT(Mapped(checked),
              Contains("spec.runPolicy.cleanPodPolicy (unset) -> "
                       "spec.runPolicy.cleanPodPolicy: None (Kubeflow's default)"));
  EXPECT_THAT(Mapped(checked),
              Contains("spec.tfReplicaSpecs.PS.template.spec.containers[0].ports[0] -> "
                       "spec.port: 2222"));
}

TEST(KubeflowTest, ChiefWorkersAndEvaluator) {
  CheckedJob checked = Check(Fixture("tf-chief-workers-evaluator.yaml"));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  const v1::TrainingJob& job = checked.job;
  const v1::TrainingInput& input = job.spec().training_input();
  EXPECT_TRUE(input.use_chief_in_tf_config());
  EXPECT_EQ(input.worker_count(), 2);  // "worker" in lower case, as Kubeflow accepts it
  EXPECT_EQ(input.evaluator_count(), 1);
  EXPECT_EQ(input.evaluator_type(), "pod-template");
  EXPECT_EQ(Strings(input.evaluator_config().container_command()),
            (std::vector<std::string>{"python", "/app/evaluate.py"}));
  EXPECT_EQ(Strings(input.master_config().container_args()),
            (std::vector<std::string>{"--model_dir=/ckpt/mnist", "--epochs=5"}));
  EXPECT_EQ(job.spec().run_policy().restart_policy(), v1::RunPolicy::OnFailure);
  EXPECT_EQ(job.spec().run_policy().clean_pod_policy(), v1::RunPolicy::Running);
  EXPECT_EQ(Template(job, "master"), nlohmann::json::parse(R"({"spec": {
      "containers": [{"name": "kubetrain",
                      "env": [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}],
                      "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}]}],
      "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "mnist-ckpt"}}]}})"));
  EXPECT_EQ(Template(job, "worker"), nullptr);
  EXPECT_EQ(Template(job, "evaluator")["spec"]["containers"][0]["volumeMounts"][0]["readOnly"],
            true);
  EXPECT_THAT(Mapped(checked), Contains("spec.tfReplicaSpecs.Chief -> the master; "
                                        "spec.trainingInput.useChiefInTfConfig: true"));
}

TEST(KubeflowTest, PyTorchMasterAndWorkersWithGpus) {
  const std::string text = Fixture("pytorch-gpu.yaml");
  CheckedJob checked = Check(text);
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  EXPECT_EQ(checked.kubeflow_kind, "PyTorchJob");
  const v1::TrainingJob& job = checked.job;
  const v1::TrainingInput& input = job.spec().training_input();
  EXPECT_EQ(input.framework(), v1::TrainingInput::PYTORCH);
  EXPECT_FALSE(input.use_chief_in_tf_config());
  EXPECT_EQ(input.worker_count(), 3);
  for (const v1::ReplicaConfig* config : {&input.master_config(), &input.worker_config()}) {
    EXPECT_EQ(config->accelerator_config().count(), 4);  // 4 and "4" alike
    EXPECT_EQ(config->accelerator_config().type(), v1::AcceleratorConfig::NVIDIA_TESLA_V100);
    EXPECT_EQ(Strings(config->container_command()),
              (std::vector<std::string>{"torchrun", "/workspace/train.py"}));
  }
  EXPECT_EQ(job.spec().port(), 23456);  // Kubeflow's default pytorchjob-port
  EXPECT_EQ(job.spec().run_policy().restart_policy(), v1::RunPolicy::OnFailure);
  const nlohmann::json master = Template(job, "master");
  EXPECT_EQ(master["spec"]["containers"][0]["resources"], nlohmann::json::parse(R"({
      "limits": {"memory": "120Gi"}, "requests": {"cpu": "30", "memory": "120Gi"}})"));
  EXPECT_EQ(master["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"],
            "nvidia-tesla-v100");
  EXPECT_EQ(master["spec"]["containers"][0]["imagePullPolicy"], "Always");
  EXPECT_THAT(Mapped(checked),
              Contains("spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources."
                       "limits.nvidia.com/gpu -> spec.trainingInput.workerConfig."
                       "acceleratorConfig: {count: 4, type: NVIDIA_TESLA_V100}"));
  EXPECT_THAT(Mapped(checked), Contains("spec.nprocPerNode -> spec.nprocPerNode: 4"));
  EXPECT_EQ(job.spec().nproc_per_node(), "4");

  // Without GKE's label the model is unnamed; 2 processes on 4 GPUs, or
  // torchrun's cpu, or a number in older manifests, are what they say; a
  // word torchrun does not know names the field.
  std::string other = absl::StrReplaceAll(
      text, {{"            cloud.google.com/gke-accelerator: nvidia-tesla-v100\n", ""},
             {"          nodeSelector:\n", ""}});
  CheckedJob unnamed = Check(other);
  ASSERT_TRUE(unnamed.ok()) << FormatErrors(unnamed.errors);
  EXPECT_EQ(unnamed.job.spec().training_input().master_config().accelerator_config().type(),
            v1::AcceleratorConfig::NVIDIA_GPU);
  for (const auto& [written, kept] : std::vector<std::pair<std::string, std::string>>{
           {"\"2\"", "2"}, {"cpu", "cpu"}, {"8", "8"}}) {
    CheckedJob given =
        Check(absl::StrReplaceAll(text, {{"nprocPerNode: \"4\"", "nprocPerNode: " + written}}));
    ASSERT_TRUE(given.ok()) << written << FormatErrors(given.errors);
    EXPECT_EQ(given.job.spec().nproc_per_node(), kept);
  }
  CheckedJob unknown =
      Check(absl::StrReplaceAll(text, {{"nprocPerNode: \"4\"", "nprocPerNode: all"}}));
  EXPECT_THAT(Errors(unknown.errors),
              Contains("9:3: spec.nprocPerNode: expected a number of processes (1 to 1024), auto, "
                       "gpu or cpu, got \"all\""));
}

// A container that names no command runs its image's entrypoint, in
// Kubeflow and here: no containerCommand, the args kept.
TEST(KubeflowTest, ContainersWithoutACommandRunTheirImagesEntrypoint) {
  CheckedJob checked = Check(Fixture("pytorch-no-command.yaml"));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  const v1::TrainingInput& input = checked.job.spec().training_input();
  EXPECT_EQ(input.framework(), v1::TrainingInput::PYTORCH);
  EXPECT_EQ(input.worker_count(), 2);
  EXPECT_EQ(input.master_config().image_uri(), "ghcr.io/example/trainer:1.0");
  EXPECT_TRUE(input.master_config().container_command().empty());
  EXPECT_TRUE(input.worker_config().container_command().empty());
  EXPECT_EQ(Strings(input.worker_config().container_args()),
            (std::vector<std::string>{"--epochs", "3"}));
  EXPECT_THAT(Mapped(checked),
              Contains("spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command "
                       "(unset) -> no containerCommand: the image's entrypoint runs, with the "
                       "args, as in Kubeflow"));
}

TEST(KubeflowTest, RunPolicyPortAndSidecar) {
  CheckedJob checked = Check(Fixture("pytorch-run-policy.yaml"));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  const v1::TrainingJob& job = checked.job;
  const v1::RunPolicy& policy = job.spec().run_policy();
  EXPECT_EQ(policy.clean_pod_policy(), v1::RunPolicy::All);
  EXPECT_EQ(policy.ttl_seconds_after_finished(), 3600);
  EXPECT_EQ(policy.active_deadline_seconds(), 7200);
  EXPECT_EQ(policy.backoff_limit(), 5);
  EXPECT_FALSE(policy.suspend());
  EXPECT_EQ(policy.restart_policy(), v1::RunPolicy::ExitCode);
  EXPECT_EQ(job.spec().port(), 29500);
  EXPECT_EQ(job.spec().training_input().worker_count(), 1);
  EXPECT_EQ(Strings(job.spec().training_input().master_config().container_command()),
            (std::vector<std::string>{"python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"}));
  EXPECT_EQ(Template(job, "master"), nlohmann::json::parse(R"({"spec": {"containers": [
      {"name": "kubetrain", "imagePullPolicy": "Always",
       "ports": [{"name": "metrics", "containerPort": 9090}]},
      {"name": "log-shipper", "image": "fluent/fluent-bit:2.2"}]}})"));
  EXPECT_EQ(Template(job, "worker"), nlohmann::json::parse(
                                         R"({"spec": {"containers": [{"name": "kubetrain",
                                             "imagePullPolicy": "Always"}]}})"));
  for (const char* line :
       {"spec.runPolicy.cleanPodPolicy -> spec.runPolicy.cleanPodPolicy: All",
        "spec.runPolicy.ttlSecondsAfterFinished -> spec.runPolicy.ttlSecondsAfterFinished: 3600",
        "spec.runPolicy.activeDeadlineSeconds -> spec.runPolicy.activeDeadlineSeconds: 7200",
        "spec.runPolicy.backoffLimit -> spec.runPolicy.backoffLimit: 5",
        "spec.runPolicy.suspend -> spec.runPolicy.suspend: false",
        "spec.pytorchReplicaSpecs.Master.restartPolicy -> spec.runPolicy.restartPolicy: ExitCode",
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].ports[0] -> spec.port: "
        "29500"}) {
    EXPECT_THAT(Mapped(checked), Contains(line));
  }
}

TEST(KubeflowTest, SchedulingPolicyBecomesTheJobsGangSchedulingPolicy) {
  CheckedJob checked = Check(Fixture("tf-gang-scheduling.yaml"));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  const v1::SchedulingPolicy& policy = checked.job.spec().run_policy().scheduling_policy();
  EXPECT_EQ(policy.min_available(), 3);
  EXPECT_EQ(policy.queue(), "research");
  EXPECT_EQ(policy.priority_class(), "team-high");
  EXPECT_EQ(policy.schedule_timeout_seconds(), 120);
  EXPECT_EQ(Template(checked.job, "worker")["spec"]["schedulerName"], "volcano");
  for (const char* line :
       {"spec.runPolicy.schedulingPolicy.minAvailable -> "
        "spec.runPolicy.schedulingPolicy.minAvailable: 3",
        "spec.runPolicy.schedulingPolicy.queue -> spec.runPolicy.schedulingPolicy.queue: research",
        "spec.runPolicy.schedulingPolicy.minResources -> left out: a PodGroup's minResources is "
        "the sum of the requests of the pods that must start together"}) {
    EXPECT_THAT(Mapped(checked), Contains(line));
  }
}

TEST(KubeflowTest, PolicyFieldsUnderSpecAndAWorkerOnlyJob) {
  CheckedJob checked = Check(Fixture("tf-legacy-run-policy.yaml"));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  const v1::TrainingJob& job = checked.job;
  EXPECT_EQ(job.spec().run_policy().clean_pod_policy(), v1::RunPolicy::None);
  EXPECT_EQ(job.spec().run_policy().ttl_seconds_after_finished(), 600);
  EXPECT_EQ(job.spec().run_policy().backoff_limit(), 2);
  EXPECT_EQ(job.spec().run_policy().restart_policy(), v1::RunPolicy::Never);
  EXPECT_EQ(job.spec().training_input().worker_count(), 2);
  EXPECT_TRUE(job.spec().training_input().use_chief_in_tf_config());
  EXPECT_THAT(Mapped(checked),
              Contains("spec.tfReplicaSpecs.Worker.restartPolicy (unset) -> "
                       "spec.runPolicy.restartPolicy: Never (Kubeflow's default)"));
  EXPECT_THAT(Mapped(checked),
              Contains("spec.tfReplicaSpecs.Worker -> worker 0 becomes the master (a "
                       "TrainingJob always has one), chief in TF_CONFIG, as TensorFlow takes "
                       "worker 0 of a chief-less cluster; the others are "
                       "spec.trainingInput.workerCount: 2"));
}

// Kubeflow's elastic PyTorchJob: its Worker replicas are the group's nodes
// (worker 0 the master, which hosts the c10d store), the policy field for
// field.
TEST(KubeflowTest, ElasticPolicyBecomesTheJobsElasticPolicy) {
  CheckedJob checked = Check(Fixture("pytorch-elastic.yaml"));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  const v1::ElasticPolicy& elastic = checked.job.spec().elastic_policy();
  EXPECT_EQ(elastic.rdzv_backend(), "c10d");
  EXPECT_EQ(elastic.min_replicas(), 1);
  EXPECT_EQ(elastic.max_replicas(), 4);
  EXPECT_EQ(elastic.max_restarts(), 10);
  EXPECT_EQ(elastic.rdzv_id(), "imagenet");
  ASSERT_EQ(elastic.rdzv_conf_size(), 1);
  EXPECT_EQ(elastic.rdzv_conf(0).key(), "join_timeout");
  EXPECT_EQ(elastic.rdzv_conf(0).value(), "900");
  EXPECT_FALSE(elastic.has_rdzv_port());
  EXPECT_EQ(checked.job.spec().training_input().worker_count(), 1);
  EXPECT_EQ(checked.job.spec().run_policy().restart_policy(), v1::RunPolicy::OnFailure);
  EXPECT_THAT(Mapped(checked), Contains("spec.elasticPolicy.minReplicas -> "
                                        "spec.elasticPolicy.minReplicas: 1"));
  EXPECT_THAT(Mapped(checked),
              Contains("spec.elasticPolicy.rdzvConf -> spec.elasticPolicy.rdzvConf"));

  // Wrong types and unknown fields name their line.
  std::string text = Fixture("pytorch-elastic.yaml");
  text = absl::StrReplaceAll(text, {{"minReplicas: 1", "minReplicas: one"},
                                    {"rdzvId: imagenet", "rdzvIdentity: imagenet"},
                                    {"value: \"900\"", "value: 900"}});
  checked = Check(text);
  EXPECT_THAT(Errors(checked.errors),
              Contains("9:5: spec.elasticPolicy.minReplicas: expected an integer >= 1, got "
                       "\"one\""));
  EXPECT_THAT(Errors(checked.errors),
              Contains("12:5: spec.elasticPolicy.rdzvIdentity: unknown field of an elasticPolicy"));
  EXPECT_THAT(Errors(checked.errors),
              Contains(::testing::HasSubstr("spec.elasticPolicy.rdzvConf[0]: expected {key: "
                                            "<string>, value: <string>}")));
}

// What has no equivalent is refused, naming the manifest's field and line.
TEST(KubeflowTest, FixturesWithNoEquivalent) {
  struct Case {
    std::string file;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"pytorch-elastic-hpa.yaml",
            "12:5: spec.elasticPolicy.metrics: no equivalent: kubetrain does not autoscale (no "
            "HorizontalPodAutoscaler); it runs the replicas given, and the group goes on while "
            "minReplicas remain. Remove metrics to run it so"},
           {"pytorch-elastic-hpa.yaml",
            "17:5: spec.elasticPolicy.standalone: no equivalent: a standalone rendezvous is one "
            "node's own; the nodes of a TrainingJob rendezvous at the master (or rdzvHost)"},
           {"tf-unknown-replica-type.yaml",
            "8:5: spec.tfReplicaSpecs.Scheduler: unknown replica type \"Scheduler\"; a TFJob has "
            "Chief, Master, Worker, PS, Evaluator"},
           {"tf-gang-scheduling-invalid.yaml",
            "9:7: spec.runPolicy.schedulingPolicy.minAvailable: expected an integer >= 1, got 0"},
           {"tf-gang-scheduling-invalid.yaml",
            "10:7: spec.runPolicy.schedulingPolicy.queue: expected a string, got 7"},
           {"tf-gang-scheduling-invalid.yaml",
            "11:7: spec.runPolicy.schedulingPolicy.minMember: unknown field of a "
            "schedulingPolicy"},
       }) {
    CheckedJob checked = Check(Fixture(c.file));
    EXPECT_FALSE(checked.ok()) << c.file;
    EXPECT_THAT(Errors(checked.errors), Contains(c.error)) << c.file;
  }
}

const char kMinimalTfJob[] = R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: small
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: tensorflow
              image: tensorflow/tensorflow:2.11.0
              command: [python, train.py]
)";

// generateName is kept for `kubectl create`, which has the server complete
// it; the prefix must leave a valid name once the server appends 5 characters.
TEST(KubeflowTest, GenerateNameIsKept) {
  const std::string tf = absl::StrReplaceAll(kMinimalTfJob, {{"  name: small\n",
                                                              "  generateName: "
                                                              "mnist-\n"}});
  CheckedJob checked = Check(tf);
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  EXPECT_EQ(checked.job.metadata().name(), "");
  EXPECT_EQ(checked.job.metadata().generate_name(), "mnist-");
  EXPECT_THAT(Mapped(checked), Contains(HasSubstr("metadata.generateName -> "
                                                  "metadata.generateName (create the job with "
                                                  "`kubectl create`")));

  CheckedJob bad = Check(absl::StrReplaceAll(tf, {{"mnist-", "9mnist-"}}));
  EXPECT_THAT(Errors(bad.errors),
              ElementsAre("metadata.generateName: must start with a letter (with the 5 "
                          "characters the API server appends) (in the TrainingJob converted "
                          "from the TFJob)"));
}

TEST(KubeflowTest, ManifestErrorsNameTheirField) {
  struct Case {
    std::string name;
    std::string text;
    std::string error;
  };
  const std::string tf = kMinimalTfJob;
  for (const Case& c : std::vector<Case>{
           {"other_kind", absl::StrReplaceAll(tf, {{"kind: TFJob", "kind: MPIJob"}}),
            "2:1: kind: \"MPIJob\": no TrainingJob equivalent; TFJob and PyTorchJob convert"},
           {"other_version",
            absl::StrReplaceAll(tf, {{"kubeflow.org/v1", "kubeflow.org/v1alpha2"}}),
            "1:1: apiVersion: only kubeflow.org/v1 manifests convert, got "
            "\"kubeflow.org/v1alpha2\""},
           {"ps_in_a_pytorch_job",
            absl::StrReplaceAll(tf, {{"kind: TFJob", "kind: PyTorchJob"},
                                     {"tfReplicaSpecs", "pytorchReplicaSpecs"},
                                     {"Worker:", "PS:"},
                                     {"name: tensorflow", "name: pytorch"}}),
            "7:5: spec.pytorchReplicaSpecs.PS: unknown replica type \"PS\"; a PyTorchJob has "
            "Master, Worker"},
           {"no_training_container", absl::StrReplaceAll(tf, {{"name: tensorflow", "name: main"}}),
            "11:11: spec.tfReplicaSpecs.Worker.template.spec.containers: no container named "
            "\"tensorflow\" (TFJob's training container)"},
           {"no_image",
            absl::StrReplaceAll(tf, {{"              image: tensorflow/tensorflow:2.11.0\n", ""}}),
            "12:15: spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: required: the "
            "image the replicas run"},
           {"all_workers_success", tf + "  successPolicy: AllWorkers\n",
            "15:3: spec.successPolicy: no equivalent for \"AllWorkers\": a TrainingJob succeeds "
            "when its master (else worker 0) does"},
           {"dynamic_workers", tf + "  enableDynamicWorker: true\n",
            "15:3: spec.enableDynamicWorker: no equivalent: a TrainingJob has a fixed set of "
            "workers"},
           {"unknown_spec_field", tf + "  priority: high\n",
            "15:3: spec.priority: unknown field of a TFJob spec"},
           {"owner_references",
            absl::StrReplaceAll(tf,
                                {{"  name: small\n", "  name: small\n  ownerReferences: []\n"}}),
            "5:3: metadata.ownerReferences: no TrainingJob equivalent"},
           {"fractional_replicas", absl::StrReplaceAll(tf, {{"replicas: 2", "replicas: 1.5"}}),
            "8:7: spec.tfReplicaSpecs.Worker.replicas: expected a count from 0 to 1000, got 1.5"},
           {"unknown_restart_policy",
            absl::StrReplaceAll(tf, {{"      replicas: 2\n",
                                      "      replicas: 2\n      restartPolicy: Sometimes\n"}}),
            "9:7: spec.tfReplicaSpecs.Worker.restartPolicy: expected Always, OnFailure, Never or "
            "ExitCode, got \"Sometimes\""},
           {"managed_elsewhere", tf + "  runPolicy:\n    managedBy: kueue.x-k8s.io/multikueue\n",
            "16:5: spec.runPolicy.managedBy: no equivalent: kubetrain's operator runs the "
            "TrainingJob, not \"kueue.x-k8s.io/multikueue\""},
       }) {
    CheckedJob checked = Check(c.text);
    EXPECT_FALSE(checked.ok()) << c.name;
    EXPECT_EQ(checked.kubeflow_kind.empty(), c.name == "other_version") << c.name;
    EXPECT_THAT(Errors(checked.errors), Contains(c.error)) << c.name << "\n" << c.text;
  }
}

TEST(KubeflowTest, RolesMustAgreeOnRestartPolicyAndPort) {
  const std::string text = Fixture("tf-chief-workers-evaluator.yaml");
  CheckedJob restart = Check(absl::StrReplaceAll(
      text, {{"    Evaluator:\n      replicas: 1\n      restartPolicy: OnFailure",
              "    Evaluator:\n      replicas: 1\n      restartPolicy: Never"}}));
  EXPECT_THAT(Errors(restart.errors),
              Contains("43:7: spec.tfReplicaSpecs.Evaluator.restartPolicy: Never differs from "
                       "Chief's OnFailure: a TrainingJob has one restartPolicy for all its "
                       "replicas"));
  CheckedJob port = Check(absl::StrReplaceAll(
      text, {{"              args: [\"--model_dir=/ckpt/mnist\"]\n",
              "              args: [\"--model_dir=/ckpt/mnist\"]\n              ports:\n"
              "                - {name: tfjob-port, containerPort: 2223}\n"}}));
  EXPECT_THAT(Errors(port.errors),
              Contains(HasSubstr("spec.tfReplicaSpecs.Evaluator.template.spec.containers[0]."
                                 "ports[0]: port 2223 differs from Chief's 2222: every replica of "
                                 "a TrainingJob listens on one port")));
  CheckedJob both = Check(absl::StrReplaceAll(
      text, {{"    worker:\n      replicas: 2", "    Master:\n      replicas: 1"}}));
  EXPECT_THAT(Errors(both.errors),
              Contains(HasSubstr("spec.tfReplicaSpecs.Master: a job has one master: Chief and "
                                 "Master are both given")));
  CheckedJob two_chiefs = Check(absl::StrReplaceAll(
      text, {{"    Chief:\n      replicas: 1", "    Chief:\n      replicas: 2"}}));
  EXPECT_THAT(Errors(two_chiefs.errors),
              Contains("12:7: spec.tfReplicaSpecs.Chief.replicas: must be 1: a TrainingJob has "
                       "one master, got 2"));
}

TEST(KubeflowTest, ServerSetFieldsAndStatusAreLeftOut) {
  const std::string text =
      absl::StrReplaceAll(kMinimalTfJob,
                          {{"  name: small\n",
                            "  name: small\n  uid: 0c9a\n  resourceVersion: \"123\"\n"
                            "  creationTimestamp: \"2024-01-01T00:00:00Z\"\n"}}) +
      "status:\n  conditions: []\n";
  CheckedJob checked = Check(text);
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  EXPECT_EQ(checked.job.metadata().uid(), "");
  EXPECT_FALSE(checked.job.has_status());
  EXPECT_THAT(Mapped(checked), Contains("metadata.uid -> left out: set by the API server"));
  EXPECT_THAT(Mapped(checked),
              Contains("status -> left out: the operator writes the TrainingJob's status"));
}

// The converted job is validated as any TrainingJob; its errors say so.
TEST(KubeflowTest, TheConvertedJobIsValidated) {
  CheckedJob checked = Check(absl::StrReplaceAll(
      kMinimalTfJob, {{"name: small", "name: a-name-much-longer-than-forty-characters-in-all"}}));
  EXPECT_THAT(Errors(checked.errors),
              Contains("metadata.name: at most 40 characters (pod names derived from it must fit "
                       "63), got 47 (in the TrainingJob converted from the TFJob)"));
}

// What `kubetrain convert` prints is a TrainingJob that reads back as the same job.
TEST(KubeflowTest, ConvertedJobsReadBackAsTrainingJobs) {
  for (const char* file :
       {"tf-ps-worker.yaml", "tf-chief-workers-evaluator.yaml", "pytorch-gpu.yaml",
        "pytorch-run-policy.yaml", "tf-legacy-run-policy.yaml"}) {
    CheckedJob converted = Check(Fixture(file));
    ASSERT_TRUE(converted.ok()) << file << FormatErrors(converted.errors);
    CheckedJob again = Check(EncodeYaml(converted.job));
    ASSERT_TRUE(again.ok()) << file << FormatErrors(again.errors);
    EXPECT_TRUE(again.kubeflow_kind.empty());
    EXPECT_EQ(nlohmann::json::parse(EncodeJson(again.job)),
              nlohmann::json::parse(EncodeJson(converted.job)))
        << file;
  }
}

TEST(KubeflowTest, OtherManifestsAreNotKubeflows) {
  EXPECT_FALSE(ConvertKubeflowJob("apiVersion: kubetrain.io/v1\nkind: TrainingJob\n").kubeflow);
  EXPECT_FALSE(ConvertKubeflowJob("trainingInput: {scaleTier: BASIC}\n").kubeflow);
  EXPECT_FALSE(ConvertKubeflowJob("apiVersion: [kubeflow.org/v1]\n").kubeflow);
  EXPECT_FALSE(ConvertKubeflowJob("{unclosed\n").kubeflow);
  // A TrainingJob with Kubeflow's apiVersion is a TrainingJob with a wrong
  // apiVersion (validation says so), not a Kubeflow kind.
  EXPECT_FALSE(ConvertKubeflowJob("apiVersion: kubeflow.org/v1\nkind: TrainingJob\n").kubeflow);
  EXPECT_TRUE(ConvertKubeflowJob("apiVersion: kubeflow.org/v1\nkind: TFJob\n").kubeflow);
}

TEST(KubeflowTest, FormatMappingListsEveryField) {
  EXPECT_EQ(FormatMapping({{"a.b", "c.d: 1"}, {"e", "left out"}}),
            "  a.b -> c.d: 1\n  e -> left out\n");
}

}  // namespace
}  // namespace kubetrain::api
