#include "operator/core/kube_objects.h"

#include <map>
#include <set>
#include <string>

#include "api/codec.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace kubetrain::core {
namespace {

using api::Role;
using nlohmann::json;
using testing::HasSubstr;

v1::TrainingJob GpuMasterJob() {
  v1::TrainingJob job;
  job.set_api_version("kubetrain.io/v1");
  job.set_kind("TrainingJob");
  job.mutable_metadata()->set_name("mnist");
  job.mutable_metadata()->set_namespace_("team-a");
  job.mutable_metadata()->set_uid("uid-123");
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_scale_tier(v1::TrainingInput::CUSTOM);
  input->set_master_type("standard_gpu");
  input->set_worker_type("standard");
  input->set_worker_count(1);
  input->add_args("--epochs=2");
  return job;
}

ReconcileOptions Options() {
  ReconcileOptions options;
  options.address = KubernetesAddresses("team-a");
  return options;
}

void SetStruct(const std::string& text, google::protobuf::Struct* out) {
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text, out).ok()) << text;
}

TEST(KubeObjectsTest, PodCarriesLabelsOwnerResourcesAndEnv) {
  const v1::TrainingJob job = GpuMasterJob();
  const auto replicas = DesiredReplicas(job, "", {}, Options());
  ASSERT_EQ(replicas.size(), 2u);
  const json pod = RenderPod(job, "team-a", replicas[0]);
  EXPECT_EQ(pod["kind"], "Pod");
  EXPECT_EQ(pod["metadata"]["name"], "mnist-master-0");
  EXPECT_EQ(pod["metadata"]["namespace"], "team-a");
  EXPECT_EQ(pod["metadata"]["labels"]["kubetrain.io/job-name"], "mnist");
  EXPECT_EQ(pod["metadata"]["labels"]["kubetrain.io/replica-type"], "master");
  EXPECT_EQ(pod["metadata"]["labels"]["kubetrain.io/replica-index"], "0");
  const json& owner = pod["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ(owner["uid"], "uid-123");
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["blockOwnerDeletion"], true);
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  const json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["name"], "kubetrain");
  EXPECT_EQ(c["command"], json({"kubetrain-runtime", "train"}));
  EXPECT_EQ(c["args"], json({"--epochs=2"}));
  EXPECT_EQ(c["ports"][0]["containerPort"], 2222);
  EXPECT_EQ(c["resources"]["requests"]["cpu"], "8");
  EXPECT_EQ(c["resources"]["requests"]["memory"], "30720Mi");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(c["securityContext"]["allowPrivilegeEscalation"], false);
  // The runtime's thread budget: the container's CPU request, as the pod has it.
  EXPECT_EQ(c["env"].back(), json::parse(R"({"name": "KUBETRAIN_CPU_REQUEST_MILLICORES",
      "valueFrom": {"resourceFieldRef": {"containerName": "kubetrain",
                                         "resource": "requests.cpu", "divisor": "1m"}}})"));
  bool has_tf_config = false;
  for (const json& e : c["env"]) {
    if (e["name"] == "TF_CONFIG") {
      has_tf_config = true;
      const json config = json::parse(e["value"].get<std::string>());
      EXPECT_EQ(config["cluster"]["worker"][0], "mnist-worker-0.team-a.svc:2222");
      EXPECT_EQ(config["task"]["type"], "master");
    }
  }
  EXPECT_TRUE(has_tf_config);
  EXPECT_FALSE(replicas[1].resources.gpus > 0);
}

TEST(KubeObjectsTest, ServiceIsHeadlessAndSelectsTheReplica) {
  const v1::TrainingJob job = GpuMasterJob();
  const auto replicas = DesiredReplicas(job, "", {}, Options());
  const json svc = RenderService(job, "team-a", replicas[1]);
  EXPECT_EQ(svc["kind"], "Service");
  EXPECT_EQ(svc["metadata"]["name"], "mnist-worker-0");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"]["kubetrain.io/replica-type"], "worker");
  EXPECT_EQ(svc["spec"]["selector"]["kubetrain.io/replica-index"], "0");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 2222);
  EXPECT_EQ(svc["metadata"]["ownerReferences"][0]["controller"], true);
}

TEST(KubeObjectsTest, DefaultImageIsPulledIfNotPresent) {
  v1::TrainingJob job = GpuMasterJob();
  job.mutable_spec()->mutable_training_input()->mutable_worker_config()->set_image_uri(
      "registry.example.com/trainer:latest");
  auto replicas = DesiredReplicas(job, "", {}, Options());
  ASSERT_EQ(replicas.size(), 2u);
  const json master = RenderPod(job, "team-a", replicas[0]);
  const json worker = RenderPod(job, "team-a", replicas[1]);
  EXPECT_EQ(master["spec"]["containers"][0]["image"],
            "kubetrain/kubetrain-runtime:" + std::string(KUBETRAIN_TEST_VERSION));
  EXPECT_EQ(master["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
  // An imageUri keeps Kubernetes' default for its tag (here Always, for :latest).
  EXPECT_EQ(worker["spec"]["containers"][0]["image"], "registry.example.com/trainer:latest");
  EXPECT_FALSE(worker["spec"]["containers"][0].contains("imagePullPolicy"));
  // A template may still choose.
  SetStruct(R"({"spec":{"containers":[{"name":"kubetrain","imagePullPolicy":"Always"}]}})",
            job.mutable_spec()->mutable_template_());
  replicas = DesiredReplicas(job, "", {}, Options());
  EXPECT_EQ(RenderPod(job, "team-a", replicas[0])["spec"]["containers"][0]["imagePullPolicy"],
            "Always");
}

TEST(KubeObjectsTest, TemplatesMergeButCannotStealLabels) {
  v1::TrainingJob job = GpuMasterJob();
  SetStruct(R"({"metadata":{"labels":{"team":"a","kubetrain.io/replica-type":"hijack"}},
                "spec":{"nodeSelector":{"pool":"gpu"},
                        "tolerations":[{"key":"gpu","operator":"Exists"}],
                        "containers":[{"name":"kubetrain",
                                       "env":[{"name":"EXTRA","value":"1"}],
                                       "resources":{"limits":{"memory":"64Gi"}}},
                                      {"name":"sidecar","image":"busybox"}]}})",
            job.mutable_spec()->mutable_template_());
  SetStruct(R"({"spec":{"nodeSelector":{"zone":"z1"}}})",
            &(*job.mutable_spec()->mutable_replica_templates())["worker"]);
  const auto replicas = DesiredReplicas(job, "", {}, Options());
  const json master = RenderPod(job, "team-a", replicas[0]);
  const json worker = RenderPod(job, "team-a", replicas[1]);
  EXPECT_EQ(master["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(master["metadata"]["labels"]["kubetrain.io/replica-type"], "master");
  EXPECT_EQ(master["spec"]["nodeSelector"], json({{"pool", "gpu"}}));
  EXPECT_EQ(worker["spec"]["nodeSelector"], json({{"pool", "gpu"}, {"zone", "z1"}}));
  EXPECT_EQ(master["spec"]["tolerations"].size(), 1u);
  ASSERT_EQ(master["spec"]["containers"].size(), 2u);
  const json& c = master["spec"]["containers"][0];
  EXPECT_EQ(c["resources"]["limits"]["memory"], "64Gi");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(c["env"].back(), json({{"name", "EXTRA"}, {"value", "1"}}));
  EXPECT_EQ(c["env"][0]["name"], "TF_CONFIG");
}

TEST(KubeObjectsTest, TemplatePortIsTheJobsPortUnlessSpecSaysOtherwise) {
  v1::TrainingJob job = GpuMasterJob();
  SetStruct(R"({"spec":{"containers":[{"ports":[{"containerPort":5000,"name":"grpc"}]}]}})",
            job.mutable_spec()->mutable_template_());
  EXPECT_EQ(TemplatePort(job), 5000);
  auto replicas = DesiredReplicas(job, "", {}, Options());
  EXPECT_EQ(replicas[0].port, 5000);
  EXPECT_THAT(replicas[0].Env("TF_CONFIG"), testing::HasSubstr("mnist-worker-0.team-a.svc:5000"));
  const json pod = RenderPod(job, "team-a", replicas[0]);
  // The template's port replaced ours rather than adding a duplicate.
  ASSERT_EQ(pod["spec"]["containers"][0]["ports"].size(), 1u);
  EXPECT_EQ(pod["spec"]["containers"][0]["ports"][0]["name"], "grpc");
  EXPECT_EQ(RenderService(job, "team-a", replicas[0])["spec"]["ports"][0]["port"], 5000);

  job.mutable_spec()->set_port(6000);  // an explicit spec.port wins
  EXPECT_EQ(DesiredReplicas(job, "", {}, Options())[0].port, 6000);

  v1::TrainingJob sidecar = GpuMasterJob();
  SetStruct(R"({"spec":{"containers":[{"name":"proxy","ports":[{"containerPort":80}]}]}})",
            sidecar.mutable_spec()->mutable_template_());
  EXPECT_EQ(TemplatePort(sidecar), std::nullopt);
  EXPECT_EQ(DesiredReplicas(sidecar, "", {}, Options())[0].port, 2222);
}

TEST(KubeObjectsTest, RestartPolicyFollowsRunPolicy) {
  struct Case {
    v1::RunPolicy::RestartPolicy policy;
    std::string want;
  };
  for (const Case& c :
       {Case{v1::RunPolicy::Never, "Never"}, Case{v1::RunPolicy::ExitCode, "Never"},
        Case{v1::RunPolicy::OnFailure, "OnFailure"}, Case{v1::RunPolicy::Always, "OnFailure"}}) {
    v1::TrainingJob job = GpuMasterJob();
    job.mutable_spec()->mutable_run_policy()->set_restart_policy(c.policy);
    const auto replicas = DesiredReplicas(job, "", {}, Options());
    EXPECT_EQ(RenderPod(job, "team-a", replicas[0])["spec"]["restartPolicy"], c.want)
        << v1::RunPolicy::RestartPolicy_Name(c.policy);
  }
}

TEST(KubeObjectsTest, ParsePodTable) {
  struct Case {
    std::string name;
    std::string pod;
    ReplicaPhase phase;
    std::optional<int> exit_code;
    std::string message;
    int restarts;
    bool node_lost;
    bool deleting;
  };
  const std::string meta =
      R"("metadata":{"name":"mnist-worker-1","creationTimestamp":"2026-01-02T03:04:05Z",)"
      R"("labels":{"kubetrain.io/job-name":"mnist","kubetrain.io/replica-type":"worker",)"
      R"("kubetrain.io/replica-index":"1"}})";
  const Case cases[] = {
      {"fresh", "{" + meta + "}", ReplicaPhase::kPending, std::nullopt, "", 0, false, false},
      {"running",
       "{" + meta +
           R"(,"status":{"phase":"Running","containerStatuses":[{"name":"kubetrain","restartCount":2,"lastState":{"terminated":{"exitCode":137,"reason":"OOMKilled"}}}]}})",
       ReplicaPhase::kRunning, 137, "", 2, false, false},
      {"failed",
       "{" + meta +
           R"(,"status":{"phase":"Failed","containerStatuses":[{"name":"kubetrain","restartCount":0,"state":{"terminated":{"exitCode":1,"message":"bad flag\n"}}}]}})",
       ReplicaPhase::kFailed, 1, "bad flag", 0, false, false},
      {"evicted",
       "{" + meta + R"(,"status":{"phase":"Failed","reason":"Evicted","message":"low memory"}})",
       ReplicaPhase::kFailed, std::nullopt, "low memory", 0, false, false},
      {"node lost", "{" + meta + R"(,"status":{"phase":"Running","reason":"NodeLost"}})",
       ReplicaPhase::kRunning, std::nullopt, "", 0, true, false},
      {"deleting",
       R"({"metadata":{"name":"mnist-worker-1","deletionTimestamp":"2026-01-02T03:05:00Z","labels":{"kubetrain.io/replica-type":"worker","kubetrain.io/replica-index":"1"}},"status":{"phase":"Unknown"}})",
       ReplicaPhase::kUnknown, std::nullopt, "", 0, false, true},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ObservedReplica> r = ParsePod(json::parse(c.pod));
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
    EXPECT_EQ(r->name, "mnist-worker-1") << c.name;
    EXPECT_EQ(r->key, (ReplicaKey{"", Role::kWorker, 1})) << c.name;
    EXPECT_EQ(r->phase, c.phase) << c.name;
    EXPECT_EQ(r->exit_code, c.exit_code) << c.name;
    EXPECT_EQ(r->termination_message, c.message) << c.name;
    EXPECT_EQ(r->container_restarts, c.restarts) << c.name;
    EXPECT_EQ(r->node_lost, c.node_lost) << c.name;
    EXPECT_EQ(r->deletion_requested, c.deleting) << c.name;
  }
}

// When a pod's current run began and when a stopped one ended, as the
// reconciler needs them to tell a chief restarted after its peers completed.
TEST(KubeObjectsTest, ParsePodReadsWhenTheRunBeganAndEnded) {
  const std::string meta =
      R"("metadata":{"name":"mnist-master-0","creationTimestamp":"2026-01-02T03:04:05Z",)"
      R"("labels":{"kubetrain.io/replica-type":"master","kubetrain.io/replica-index":"0"}})";
  auto at = [](const char* text) {
    absl::Time t;
    std::string error;
    EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, text, &t, &error)) << error;
    return t;
  };
  struct Case {
    std::string name;
    std::string status;
    absl::Time run_since;
    absl::Time finished;
  };
  const Case cases[] = {
      {"not started", R"({"phase":"Pending"})", absl::InfinitePast(), absl::InfinitePast()},
      {"running",
       R"({"phase":"Running","containerStatuses":[{"name":"kubetrain","state":{"running":{"startedAt":"2026-01-02T03:04:09Z"}}}]})",
       at("2026-01-02T03:04:09Z"), absl::InfinitePast()},
      // Restarted in place: the current run, not the one before it.
      {"running again",
       R"({"phase":"Running","containerStatuses":[{"name":"kubetrain","restartCount":1,"state":{"running":{"startedAt":"2026-01-02T03:09:00Z"}},"lastState":{"terminated":{"exitCode":137,"startedAt":"2026-01-02T03:04:09Z","finishedAt":"2026-01-02T03:08:50Z"}}}]})",
       at("2026-01-02T03:09:00Z"), absl::InfinitePast()},
      // Between two runs: the next one begins after the last one ended.
      {"waiting to restart",
       R"({"phase":"Running","containerStatuses":[{"name":"kubetrain","restartCount":1,"state":{"waiting":{"reason":"CrashLoopBackOff"}},"lastState":{"terminated":{"exitCode":137,"finishedAt":"2026-01-02T03:08:50Z"}}}]})",
       at("2026-01-02T03:08:50Z"), absl::InfinitePast()},
      {"succeeded",
       R"({"phase":"Succeeded","containerStatuses":[{"name":"kubetrain","state":{"terminated":{"exitCode":0,"startedAt":"2026-01-02T03:04:09Z","finishedAt":"2026-01-02T03:07:00Z"}}}]})",
       absl::InfinitePast(), at("2026-01-02T03:07:00Z")},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ObservedReplica> r =
        ParsePod(json::parse("{" + meta + R"(,"status":)" + c.status + "}"));
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
    EXPECT_EQ(r->created, at("2026-01-02T03:04:05Z")) << c.name;
    EXPECT_EQ(r->run_since, c.run_since) << c.name;
    EXPECT_EQ(r->finished, c.finished) << c.name;
  }
  // A time that is not one is refused, naming the field.
  absl::StatusOr<ObservedReplica> bad = ParsePod(json::parse(
      "{" + meta +
      R"(,"status":{"phase":"Succeeded","containerStatuses":[{"name":"kubetrain","state":{"terminated":{"exitCode":0,"finishedAt":"soon"}}}]}})"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              testing::HasSubstr("containerStatuses.terminated.finishedAt"));
}

TEST(KubeObjectsTest, ParsePodRejectsWhatIsNotAReplica) {
  const char* cases[] = {
      R"(17)",
      R"({})",
      R"({"metadata":{"name":"x"}})",
      R"({"metadata":{"name":"x","labels":{"kubetrain.io/replica-type":"worker"}}})",
      R"({"metadata":{"name":"x","labels":{"kubetrain.io/replica-type":"worker","kubetrain.io/replica-index":"0"}},"status":{"phase":"Exploded"}})",
      R"({"metadata":{"name":"x","creationTimestamp":"yesterday","labels":{"kubetrain.io/replica-type":"worker","kubetrain.io/replica-index":"0"}}})",
  };
  for (const char* text : cases) {
    absl::StatusOr<ObservedReplica> r = ParsePod(json::parse(text));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(KubeObjectsTest, RenderedPodParsesBackToItsSlot) {
  const v1::TrainingJob job = GpuMasterJob();
  for (const DesiredReplica& replica : DesiredReplicas(job, "3", {}, Options())) {
    absl::StatusOr<ObservedReplica> r = ParsePod(RenderPod(job, "team-a", replica));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->name, replica.name);
    EXPECT_EQ(r->key, replica.key);
    absl::StatusOr<ObservedService> s = ParseService(RenderService(job, "team-a", replica));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->key, replica.key);
  }
}

TEST(KubeObjectsTest, RenderJobListsServiceThenPodPerReplica) {
  v1::TrainingJob job = GpuMasterJob();
  absl::StatusOr<std::vector<json>> objects = RenderJob(job, "ns1", 1, Options());
  ASSERT_TRUE(objects.ok()) << objects.status();
  ASSERT_EQ(objects->size(), 4u);
  EXPECT_EQ((*objects)[0]["kind"], "Service");
  EXPECT_EQ((*objects)[1]["kind"], "Pod");
  EXPECT_EQ((*objects)[1]["metadata"]["namespace"], "ns1");
  // The namespace given to render is where the TF_CONFIG addresses point.
  EXPECT_THAT((*objects)[1]["spec"]["containers"][0]["env"][0]["value"].get<std::string>(),
              testing::HasSubstr("mnist-worker-0.ns1.svc:2222"));

  v1::TrainingJob invalid = GpuMasterJob();
  invalid.mutable_spec()->mutable_training_input()->set_master_type("");
  EXPECT_EQ(RenderJob(invalid, "ns1", 1, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The output claim's volume, mounted at jobDir in the training container of
// every pod: every role (the evaluator reads the master's checkpoints there)
// and every trial (each in <jobDir>/<trialId>).
TEST(KubeObjectsTest, OutputClaimIsMountedAtJobDirInEveryRoleAndTrial) {
  v1::TrainingJob job = GpuMasterJob();
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_job_dir("/outputs");
  input->set_parameter_server_type("standard");
  input->set_parameter_server_count(1);
  input->set_evaluator_count(1);
  job.mutable_spec()->mutable_output_storage()->set_claim_name("team-outputs");
  job.mutable_spec()->mutable_output_storage()->set_sub_path("mnist");
  for (const std::string trial : {"", "7"}) {
    std::set<std::string> roles;
    for (const DesiredReplica& replica : DesiredReplicas(job, trial, {}, Options())) {
      const json pod = RenderPod(job, "team-a", replica);
      roles.insert(pod["metadata"]["labels"]["kubetrain.io/replica-type"].get<std::string>());
      EXPECT_EQ(pod["spec"]["volumes"], json::parse(R"([{"name": "kubetrain-output",
                                 "persistentVolumeClaim": {"claimName": "team-outputs"}}])"))
          << replica.name;
      const json& container = pod["spec"]["containers"][0];
      EXPECT_EQ(container["volumeMounts"],
                json::parse(R"([{"name": "kubetrain-output", "mountPath": "/outputs",
                                 "subPath": "mnist"}])"))
          << replica.name;
      EXPECT_EQ(pod["spec"]["securityContext"]["fsGroup"], 65532);
      EXPECT_EQ(pod["spec"]["securityContext"]["fsGroupChangePolicy"], "OnRootMismatch");
      // The folder the trainer is told is inside the mount.
      const std::vector<std::string> args = container["args"];
      ASSERT_GE(args.size(), 2u);
      EXPECT_EQ(args[args.size() - 2], "--job-dir");
      EXPECT_EQ(args.back(), trial.empty() ? "/outputs" : "/outputs/7");
    }
    EXPECT_EQ(roles, (std::set<std::string>{"master", "worker", "ps", "evaluator"}));
  }
}

TEST(KubeObjectsTest, TemplateVolumeAndTemplateSecurityContextAreKept) {
  v1::TrainingJob job = GpuMasterJob();
  job.mutable_spec()->mutable_training_input()->set_job_dir("/outputs");
  job.mutable_spec()->mutable_output_storage()->set_volume_name("nfs");
  SetStruct(R"({"spec": {"securityContext": {"fsGroup": 2000},
                         "volumes": [{"name": "nfs", "nfs": {"server": "fs", "path": "/x"}}]}})",
            job.mutable_spec()->mutable_template_());
  const json pod = RenderPod(job, "team-a", DesiredReplicas(job, "", {}, Options())[0]);
  // The template's volume, once; no claim volume of ours.
  EXPECT_EQ(pod["spec"]["volumes"],
            json::parse(R"([{"name": "nfs", "nfs": {"server": "fs", "path": "/x"}}])"));
  EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"],
            json::parse(R"([{"name": "nfs", "mountPath": "/outputs"}])"));
  EXPECT_EQ(pod["spec"]["securityContext"]["fsGroup"], 2000);
  EXPECT_EQ(pod["spec"]["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
}

// A field of a rendered object, null when absent (a const json's operator[]
// must not be asked for a key it lacks).
json At(const json& object, const std::string& pointer) {
  return object.value(json::json_pointer(pointer), json());
}

TEST(KubeObjectsTest, OwnImagesSayTheyRunAsNonRoot) {
  v1::TrainingJob job = GpuMasterJob();
  job.mutable_spec()->mutable_training_input()->mutable_worker_config()->set_image_uri(
      "tensorflow/tensorflow:2.15.0");
  const auto replicas = DesiredReplicas(job, "", {}, Options());
  ASSERT_EQ(replicas.size(), 2u);
  const json master = RenderPod(job, "team-a", replicas[0]);
  EXPECT_EQ(At(master, "/spec/containers/0/securityContext/runAsNonRoot"), true);
  EXPECT_EQ(At(master, "/spec/securityContext/seccompProfile/type"), "RuntimeDefault");
  EXPECT_EQ(At(master, "/spec/containers/0/securityContext/allowPrivilegeEscalation"), false);
  EXPECT_EQ(At(master, "/spec/containers/0/securityContext/capabilities/drop"), json({"ALL"}));
  // A user's image may run as root: the pod does not claim otherwise.
  const json worker = RenderPod(job, "team-a", replicas[1]);
  EXPECT_EQ(At(worker, "/spec/containers/0/image"), "tensorflow/tensorflow:2.15.0");
  EXPECT_EQ(At(worker, "/spec/containers/0/securityContext/runAsNonRoot"), nullptr);
  EXPECT_EQ(At(worker, "/spec/securityContext/runAsNonRoot"), nullptr);

  // The Python runtime images are kubetrain's too.
  v1::TrainingJob package = GpuMasterJob();
  package.mutable_spec()->mutable_training_input()->set_python_module("trainer.task");
  package.mutable_spec()->mutable_training_input()->add_package_uris(
      "configmap://trainer-package/trainer-0.1.tar.gz");
  const json python = RenderPod(package, "team-a", DesiredReplicas(package, "", {}, Options())[0]);
  EXPECT_EQ(At(python, "/spec/containers/0/command/0"), "kubetrain-runtime");
  EXPECT_EQ(At(python, "/spec/containers/0/securityContext/runAsNonRoot"), true);

  // Templates that ask for root, or put another image in the training
  // container, get what they ask for and no runAsNonRoot beside it (the
  // kubelet would not start the container; the namespace's admission decides).
  for (const char* spec_template :
       {R"({"spec": {"securityContext": {"runAsUser": 0}}})",
        R"({"spec": {"containers": [{"name": "kubetrain", "securityContext": {"runAsUser": 0}}]}})",
        R"({"spec": {"securityContext": {"runAsNonRoot": false}}})",
        R"({"spec": {"containers": [{"name": "kubetrain", "image": "root/trainer:1"}]}})"}) {
    SCOPED_TRACE(spec_template);
    v1::TrainingJob templated = GpuMasterJob();
    SetStruct(spec_template, templated.mutable_spec()->mutable_template_());
    const json pod =
        RenderPod(templated, "team-a", DesiredReplicas(templated, "", {}, Options())[0]);
    EXPECT_EQ(At(pod, "/spec/containers/0/securityContext/runAsNonRoot"), nullptr);
    EXPECT_NE(At(pod, "/spec/securityContext/runAsNonRoot"), true);
  }
  // A sidecar a template adds is the user's to declare.
  v1::TrainingJob sidecar = GpuMasterJob();
  SetStruct(R"({"spec": {"containers": [{"name": "proxy", "image": "envoy"}]}})",
            sidecar.mutable_spec()->mutable_template_());
  const json with_sidecar =
      RenderPod(sidecar, "team-a", DesiredReplicas(sidecar, "", {}, Options())[0]);
  EXPECT_EQ(At(with_sidecar, "/spec/containers/0/securityContext/runAsNonRoot"), true);
  EXPECT_EQ(At(with_sidecar, "/spec/containers/1/name"), "proxy");
  EXPECT_EQ(At(with_sidecar, "/spec/containers/1/securityContext"), nullptr);
}

TEST(KubeObjectsTest, PodsGetNoApiCredentialsUnlessAServiceAccountIsNamed) {
  v1::TrainingJob job = GpuMasterJob();
  const json plain = RenderPod(job, "team-a", DesiredReplicas(job, "", {}, Options())[0]);
  EXPECT_EQ(plain["spec"]["automountServiceAccountToken"], false);

  // Named: the service account's own setting applies.
  SetStruct(R"({"spec": {"serviceAccountName": "trainer"}})",
            job.mutable_spec()->mutable_template_());
  const json named = RenderPod(job, "team-a", DesiredReplicas(job, "", {}, Options())[0]);
  EXPECT_EQ(named["spec"]["serviceAccountName"], "trainer");
  EXPECT_FALSE(named["spec"].contains("automountServiceAccountToken"));

  // Asked for outright, on one role.
  v1::TrainingJob asked = GpuMasterJob();
  SetStruct(R"({"spec": {"automountServiceAccountToken": true}})",
            &(*asked.mutable_spec()->mutable_replica_templates())["worker"]);
  const auto replicas = DesiredReplicas(asked, "", {}, Options());
  EXPECT_EQ(RenderPod(asked, "team-a", replicas[0])["spec"]["automountServiceAccountToken"], false);
  EXPECT_EQ(RenderPod(asked, "team-a", replicas[1])["spec"]["automountServiceAccountToken"], true);
}

TEST(KubeObjectsTest, WithoutOutputStorageNothingIsMounted) {
  v1::TrainingJob job = GpuMasterJob();
  job.mutable_spec()->mutable_training_input()->set_job_dir("/outputs");
  const json pod = RenderPod(job, "team-a", DesiredReplicas(job, "", {}, Options())[0]);
  EXPECT_FALSE(pod["spec"].contains("volumes"));
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("volumeMounts"));
  EXPECT_FALSE(pod["spec"]["securityContext"].contains("fsGroup"));
}

TEST(KubeObjectsTest, PerJobClaimIsOwnedByTheJobAndRenderedFirst) {
  v1::TrainingJob job = GpuMasterJob();
  job.mutable_spec()->mutable_training_input()->set_job_dir("/outputs");
  v1::NewOutputClaim* claim = job.mutable_spec()->mutable_output_storage()->mutable_new_claim();
  claim->set_size("20Gi");
  json rendered = RenderOutputClaim(job, "team-a");
  EXPECT_EQ(rendered, json::parse(R"({
      "apiVersion": "v1", "kind": "PersistentVolumeClaim",
      "metadata": {"name": "mnist-output", "namespace": "team-a",
                   "labels": {"kubetrain.io/job-name": "mnist"},
                   "ownerReferences": [{"apiVersion": "kubetrain.io/v1", "kind": "TrainingJob",
                                        "name": "mnist", "uid": "uid-123", "controller": true,
                                        "blockOwnerDeletion": true}]},
      "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "20Gi"}}}
  })"));
  claim->set_storage_class_name("");  // set but empty: no class
  claim->set_access_mode(v1::NewOutputClaim::ReadWriteOnce);
  rendered = RenderOutputClaim(job, "team-a");
  EXPECT_EQ(rendered["spec"]["storageClassName"], "");
  EXPECT_EQ(rendered["spec"]["accessModes"], json({"ReadWriteOnce"}));

  const json pod = RenderPod(job, "team-a", DesiredReplicas(job, "", {}, Options())[0]);
  EXPECT_EQ(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "mnist-output");
  absl::StatusOr<std::vector<json>> objects = RenderJob(job, "ns1", 1, Options());
  ASSERT_TRUE(objects.ok()) << objects.status();
  ASSERT_EQ(objects->size(), 5u);
  EXPECT_EQ((*objects)[0]["kind"], "PersistentVolumeClaim");
  EXPECT_EQ((*objects)[0]["metadata"]["namespace"], "ns1");
}

// Cloud ML's package workflow: every replica runs the module through exec,
// which installs the packages first, in the Python runtime image.
TEST(KubeObjectsTest, PythonModuleReplicasInstallThePackagesThenRunTheModule) {
  v1::TrainingJob job = GpuMasterJob();
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_python_module("trainer.task");
  input->add_package_uris("configmap://mnist-package/trainer-0.0.0.tar.gz");
  input->add_package_uris("https://pkgs.example.com/util-1.0-py3-none-any.whl");
  input->set_job_dir("/outputs/mnist");
  v1::ParameterSpec* lr = input->mutable_hyperparameters()->add_params();
  lr->set_parameter_name("learning_rate");
  lr->set_type(v1::ParameterSpec::DOUBLE);
  lr->set_min_value(0.01);
  lr->set_max_value(0.1);
  const std::vector<DesiredReplica> replicas =
      DesiredReplicas(job, "3", {{"learning_rate", "0.05"}}, Options());
  ASSERT_EQ(replicas.size(), 2u);
  for (const DesiredReplica& replica : replicas) {
    const json pod = RenderPod(job, "team-a", replica);
    const json& c = pod["spec"]["containers"][0];
    EXPECT_EQ(c["image"], "kubetrain/kubetrain-python-runtime:" KUBETRAIN_TEST_VERSION);
    EXPECT_EQ(c["command"], json({"kubetrain-runtime", "exec", "--package",
                                  "/var/kubetrain/packages/0/trainer-0.0.0.tar.gz", "--package",
                                  "https://pkgs.example.com/util-1.0-py3-none-any.whl", "--",
                                  "python3", "-m", "trainer.task"}));
    EXPECT_EQ(c["args"],
              json({"--epochs=2", "--learning_rate=0.05", "--job-dir", "/outputs/mnist/3"}));
    EXPECT_EQ(c["volumeMounts"], json::parse(R"([{"name": "kubetrain-package-0",
                               "mountPath": "/var/kubetrain/packages/0", "readOnly": true}])"));
    EXPECT_EQ(pod["spec"]["volumes"], json::parse(R"([{"name": "kubetrain-package-0",
                               "configMap": {"name": "mnist-package", "items":
                                 [{"key": "trainer-0.0.0.tar.gz",
                                   "path": "trainer-0.0.0.tar.gz"}]}}])"));
    std::map<std::string, std::string> env;
    for (const json& e : c["env"]) env[e["name"]] = e.value("value", "");
    EXPECT_EQ(env["CLOUD_ML_JOB_ID"], "mnist");
    EXPECT_EQ(env["CLOUD_ML_TRIAL_ID"], "3");
    EXPECT_THAT(env["TF_CONFIG"], testing::HasSubstr("\"trial\":\"3\""));
  }
}

TEST(KubeObjectsTest, PythonModuleKeepsARolesImageAndCommand) {
  v1::TrainingJob job = GpuMasterJob();
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_python_module("trainer.task");
  input->mutable_master_config()->set_image_uri("registry.example.com/trainer:1");
  input->mutable_worker_config()->add_container_command("python3");
  input->mutable_worker_config()->add_container_command("worker.py");
  const std::vector<DesiredReplica> replicas = DesiredReplicas(job, "", {}, Options());
  ASSERT_EQ(replicas.size(), 2u);
  // The master's image holds the module: no package to install.
  EXPECT_EQ(replicas[0].image, "registry.example.com/trainer:1");
  EXPECT_EQ(replicas[0].command, (std::vector<std::string>{"kubetrain-runtime", "exec", "--",
                                                           "python3", "-m", "trainer.task"}));
  EXPECT_EQ(replicas[0].python_module, "trainer.task");
  // The worker runs its own command, in the default image.
  EXPECT_EQ(replicas[1].image, Options().default_image);
  EXPECT_EQ(replicas[1].command, (std::vector<std::string>{"python3", "worker.py"}));
  EXPECT_EQ(replicas[1].python_module, "");
  const json pod = RenderPod(job, "team-a", replicas[0]);
  EXPECT_FALSE(pod["spec"].contains("volumes"));
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("volumeMounts"));
}

// An image of the user's with no command runs its own entrypoint (Cloud ML's
// custom containers, Kubeflow's containers without a command), never
// kubetrain-runtime, which it does not hold.
TEST(KubeObjectsTest, AnImageWithoutACommandRunsItsEntrypointWithTheArgs) {
  v1::TrainingJob job = GpuMasterJob();
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->mutable_master_config()->set_image_uri("registry.example.com/trainer:1");
  input->set_job_dir("/out");
  const std::vector<DesiredReplica> replicas = DesiredReplicas(job, "", {}, Options());
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_TRUE(replicas[0].command.empty());
  const json master = RenderPod(job, "team-a", replicas[0])["spec"]["containers"][0];
  EXPECT_EQ(master["image"], "registry.example.com/trainer:1");
  EXPECT_FALSE(master.contains("command"));
  EXPECT_EQ(master["args"], json({"--epochs=2", "--job-dir", "/out"}));
  // The worker has no image of its own: the built-in trainer in kubetrain's.
  EXPECT_EQ(replicas[1].command, (std::vector<std::string>{"kubetrain-runtime", "train"}));
  // Neither args nor command: the image's ENTRYPOINT and CMD, as built.
  input->clear_args();
  input->clear_job_dir();
  const json bare =
      RenderPod(job, "team-a", DesiredReplicas(job, "", {}, Options())[0])["spec"]["containers"][0];
  EXPECT_FALSE(bare.contains("command"));
  EXPECT_FALSE(bare.contains("args"));
}

// A tuning trial whose master runs its image's entrypoint: the trainer
// writes the hypertune file on a shared volume, a native sidecar of
// kubetrain's image reports it with the trial's token, which the trainer's
// container does not get.
TEST(KubeObjectsTest, AnEntrypointTrialsChiefGetsAMetricsSidecar) {
  v1::TrainingJob job = GpuMasterJob();
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->mutable_master_config()->set_image_uri("registry.example.com/trainer:1");
  input->mutable_hyperparameters()->set_hyperparameter_metric_tag("accuracy");
  input->mutable_hyperparameters()->add_params()->set_parameter_name("lr");
  ReconcileOptions options = Options();
  options.metrics_address = "kubetrain-operator.kubetrain:9090";
  options.trial_token = [](const std::string&, const std::string& trial) {
    return "token-" + trial;
  };
  const std::vector<DesiredReplica> replicas = DesiredReplicas(job, "3", {{"lr", "0.1"}}, options);
  ASSERT_EQ(replicas.size(), 2u);
  const DesiredReplica& master = replicas[0];
  ASSERT_TRUE(master.metrics_sidecar.has_value());
  EXPECT_EQ(master.Env("CLOUD_ML_HP_METRIC_FILE"), "/var/kubetrain/metrics/output.metrics");
  EXPECT_EQ(master.Env("KUBETRAIN_METRICS_TOKEN"), "");
  EXPECT_EQ(master.Env("KUBETRAIN_METRICS_ADDR"), "");
  EXPECT_EQ(master.Env("CLOUD_ML_TRIAL_ID"), "3");
  // The worker runs the built-in trainer, which reports itself (not the
  // chief: its reports do not count, but it has what `train` reads).
  EXPECT_FALSE(replicas[1].metrics_sidecar.has_value());

  const json pod = RenderPod(job, "team-a", master);
  const json& trainer = pod["spec"]["containers"][0];
  EXPECT_FALSE(trainer.contains("command"));
  EXPECT_THAT(trainer["volumeMounts"].dump(),
              HasSubstr(R"({"mountPath":"/var/kubetrain/metrics","name":"kubetrain-metrics"})"));
  EXPECT_THAT(pod["spec"]["volumes"].dump(),
              HasSubstr(R"({"emptyDir":{},"name":"kubetrain-metrics"})"));
  ASSERT_EQ(pod["spec"]["initContainers"].size(), 1u);
  const json& sidecar = pod["spec"]["initContainers"][0];
  EXPECT_EQ(sidecar["name"], "kubetrain-metrics");
  EXPECT_EQ(sidecar["image"], options.default_image);
  EXPECT_EQ(sidecar["restartPolicy"], "Always");
  EXPECT_EQ(sidecar["command"], json({"kubetrain-runtime", "collect", "--file",
                                      "/var/kubetrain/metrics/output.metrics"}));
  std::map<std::string, std::string> env;
  for (const json& var : sidecar["env"]) env[var["name"]] = var["value"];
  EXPECT_EQ(env["KUBETRAIN_METRICS_ADDR"], "kubetrain-operator.kubetrain:9090");
  EXPECT_EQ(env["KUBETRAIN_METRICS_TOKEN"], "token-3");
  EXPECT_EQ(env["KUBETRAIN_TRIAL_ID"], "3");
  EXPECT_EQ(env["KUBETRAIN_TASK_TYPE"], "master");
  EXPECT_EQ(env["KUBETRAIN_METRIC_TAG"], "accuracy");
  EXPECT_EQ(env.count("TF_CONFIG"), 0u);
  EXPECT_EQ(sidecar["securityContext"]["runAsNonRoot"], true);
  // Outside a trial there is nothing to report: no sidecar.
  EXPECT_FALSE(DesiredReplicas(job, "", {}, options)[0].metrics_sidecar.has_value());
}

}  // namespace
}  // namespace kubetrain::core
