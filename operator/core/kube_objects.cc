#include "operator/core/kube_objects.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "api/defaults.h"
#include "api/field_error.h"
#include "api/validation.h"
#include "common/cpu_budget/cpu_budget.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "operator/core/output_storage.h"
#include "operator/core/pod_group.h"
#include "operator/core/python_module.h"

namespace kubetrain::core {
namespace {

using nlohmann::json;

// The group of the runtime image's user (deploy/docker/runtime.Dockerfile).
constexpr int kRuntimeGroupId = 65532;

// Kubernetes quantities: whole cores as "4", fractions in millicores.
std::string CpuQuantity(double cores) {
  if (cores == std::floor(cores)) return std::to_string(static_cast<int64_t>(cores));
  return std::to_string(static_cast<int64_t>(std::llround(cores * 1000))) + "m";
}

}  // namespace

json OwnerReference(const v1::TrainingJob& job) {
  return {{"apiVersion", job.api_version().empty() ? api::kApiVersion : job.api_version()},
          {"kind", api::kKind},
          {"name", job.metadata().name()},
          {"uid", job.metadata().uid()},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

namespace {

json Metadata(const v1::TrainingJob& job, const std::string& namespace_name,
              const DesiredReplica& replica) {
  json labels = json::object();
  for (const auto& [k, v] : replica.labels) labels[k] = v;
  return {{"name", replica.name},
          {"namespace", namespace_name},
          {"labels", labels},
          {"ownerReferences", json::array({OwnerReference(job)})}};
}

// A google.protobuf.Struct as JSON; an empty object when unset or unreadable.
json StructToJson(const google::protobuf::Struct& s) {
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(s, &text).ok()) return json::object();
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_object() ? parsed : json::object();
}

// RFC 7386 merge patch: objects merged key by key, null deletes, anything
// else replaces.
void MergePatch(json& target, const json& patch) {
  if (!patch.is_object()) {
    target = patch;
    return;
  }
  if (!target.is_object()) target = json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it.value().is_null()) {
      target.erase(it.key());
    } else {
      MergePatch(target[it.key()], it.value());
    }
  }
}

// Merges list entries by `key` (env vars by "name", ports by
// "containerPort"): an entry with the same key replaces ours.
void MergeByKey(json& target, const json& additions, const char* key) {
  if (!additions.is_array()) return;
  if (!target.is_array()) target = json::array();
  for (const json& item : additions) {
    bool replaced = false;
    if (item.is_object() && item.contains(key)) {
      for (json& existing : target) {
        if (existing.is_object() && existing.contains(key) && existing[key] == item[key]) {
          existing = item;
          replaced = true;
        }
      }
    }
    if (!replaced) target.push_back(item);
  }
}

void Append(json& target, const json& additions) {
  if (!additions.is_array()) return;
  if (!target.is_array()) target = json::array();
  for (const json& item : additions) target.push_back(item);
}

void MergeContainer(json& ours, const json& theirs) {
  if (!theirs.is_object()) return;
  for (auto it = theirs.begin(); it != theirs.end(); ++it) {
    const std::string& key = it.key();
    if (key == "name") continue;
    if (key == "env") {
      MergeByKey(ours[key], it.value(), "name");
    } else if (key == "ports") {
      MergeByKey(ours[key], it.value(), "containerPort");
    } else if (key == "volumeMounts" || key == "envFrom" || key == "volumeDevices") {
      Append(ours[key], it.value());
    } else {
      MergePatch(ours[key], it.value());
    }
  }
}

// Applies a PodTemplateSpec ({metadata, spec}) over a rendered pod.
void ApplyTemplate(json& pod, const json& tmpl) {
  if (!tmpl.is_object()) return;
  if (auto meta = tmpl.find("metadata"); meta != tmpl.end() && meta->is_object()) {
    for (const char* field : {"labels", "annotations"}) {
      auto extra = meta->find(field);
      if (extra == meta->end() || !extra->is_object()) continue;
      json merged = *extra;
      // Ours win: the reconciler and the Services select on them.
      if (pod["metadata"].contains(field)) MergePatch(merged, pod["metadata"][field]);
      pod["metadata"][field] = merged;
    }
  }
  auto spec = tmpl.find("spec");
  if (spec == tmpl.end() || !spec->is_object()) return;
  for (auto it = spec->begin(); it != spec->end(); ++it) {
    const std::string& key = it.key();
    if (key == "containers" && it.value().is_array()) {
      for (const json& container : it.value()) {
        const std::string name =
            container.is_object() && container.contains("name") && container["name"].is_string()
                ? container["name"].get<std::string>()
                : kContainerName;
        if (name == kContainerName) {
          MergeContainer(pod["spec"]["containers"][0], container);
        } else {
          pod["spec"]["containers"].push_back(container);
        }
      }
    } else if (key == "volumes" || key == "tolerations" || key == "initContainers" ||
               key == "imagePullSecrets") {
      Append(pod["spec"][key], it.value());
    } else {
      MergePatch(pod["spec"][key], it.value());
    }
  }
}

// spec.outputStorage's volume and its mount at jobDir (kube_objects.h).
void AddOutputMount(json& pod, const v1::TrainingJob& job) {
  std::optional<OutputMount> mount = OutputMountOf(job);
  if (!mount) return;
  if (!mount->claim_name.empty()) {
    pod["spec"]["volumes"].push_back(
        {{"name", mount->volume_name},
         {"persistentVolumeClaim", {{"claimName", mount->claim_name}}}});
  }
  json volume_mount = {{"name", mount->volume_name}, {"mountPath", mount->mount_path}};
  if (!mount->sub_path.empty()) volume_mount["subPath"] = mount->sub_path;
  pod["spec"]["containers"][0]["volumeMounts"].push_back(volume_mount);
  pod["spec"]["securityContext"]["fsGroup"] = kRuntimeGroupId;
  pod["spec"]["securityContext"]["fsGroupChangePolicy"] = "OnRootMismatch";
}

// kubetrain's images run as uid 65532: the training container says
// runAsNonRoot, which lets the pod into a namespace that enforces Pod
// Security "restricted". Not when the templates have put another image in
// it, or ask for root or say otherwise themselves (the kubelet would refuse
// to start a container both root and non-root); nor for containers the
// templates add: what those run is the user's to declare.
void MarkNonRoot(json& spec, const DesiredReplica& replica) {
  if (!replica.image_runs_as_non_root) return;
  json* container = nullptr;
  for (json& c : spec["containers"]) {
    if (c.value("name", "") == kContainerName) container = &c;
  }
  if (container == nullptr || container->value("image", "") != replica.image) return;
  auto says = [](const json& object, const char* field) {
    return object.contains("securityContext") && object["securityContext"].is_object() &&
           object["securityContext"].contains(field);
  };
  if (says(spec, "runAsUser") || says(spec, "runAsNonRoot") || says(*container, "runAsUser") ||
      says(*container, "runAsNonRoot")) {
    return;
  }
  (*container)["securityContext"]["runAsNonRoot"] = true;
}

// The packages a pythonModule replica installs from ConfigMaps
// (python_module.h): read-only volumes, each holding its package file only.
// The volume the trainer and its metrics sidecar share, and the sidecar: a
// native sidecar (an init container that keeps running, Kubernetes 1.29+),
// so that the pod ends when the trainer does, after the sidecar has sent the
// last report.
void AddMetricsSidecar(json& pod, const DesiredReplica& replica) {
  if (!replica.metrics_sidecar) return;
  const DesiredReplica::MetricsSidecar& sidecar = *replica.metrics_sidecar;
  const std::string volume = DesiredReplica::kMetricsSidecarName;
  pod["spec"]["volumes"].push_back({{"name", volume}, {"emptyDir", json::object()}});
  const json mount = {{"name", volume}, {"mountPath", kMetricsSidecarFolder}};
  pod["spec"]["containers"][0]["volumeMounts"].push_back(mount);
  json env = json::array();
  for (const auto& [name, value] : sidecar.env) env.push_back({{"name", name}, {"value", value}});
  pod["spec"]["initContainers"].push_back(
      {{"name", volume},
       {"image", sidecar.image},
       {"imagePullPolicy", "IfNotPresent"},
       {"restartPolicy", "Always"},
       {"command", {"kubetrain-runtime", "collect", "--file", sidecar.metric_file}},
       {"env", env},
       {"volumeMounts", json::array({mount})},
       {"resources",
        {{"requests", {{"cpu", "10m"}, {"memory", "32Mi"}}}, {"limits", {{"memory", "64Mi"}}}}},
       {"securityContext",
        {{"allowPrivilegeEscalation", false},
         {"capabilities", {{"drop", json::array({"ALL"})}}},
         {"runAsNonRoot", true}}}});
}

void AddPackageMounts(json& pod, const DesiredReplica& replica) {
  for (const PackageMount& mount : replica.package_mounts) {
    pod["spec"]["volumes"].push_back(
        {{"name", mount.volume},
         {"configMap",
          {{"name", mount.config_map},
           {"items", json::array({{{"key", mount.key}, {"path", mount.key}}})}}}});
    pod["spec"]["containers"][0]["volumeMounts"].push_back(
        {{"name", mount.volume}, {"mountPath", mount.mount_path}, {"readOnly", true}});
  }
}

// ---- Reading objects -------------------------------------------------------

const json* Field(const json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

std::string StringField(const json& object, const char* name) {
  const json* f = Field(object, name);
  return f != nullptr && f->is_string() ? f->get<std::string>() : std::string();
}

absl::StatusOr<std::map<std::string, std::string>> ReadLabels(const json& object,
                                                              const std::string& what) {
  std::map<std::string, std::string> labels;
  const json* metadata = Field(object, "metadata");
  const json* raw = metadata == nullptr ? nullptr : Field(*metadata, "labels");
  if (raw == nullptr || !raw->is_object()) {
    return absl::InvalidArgumentError(what + ": metadata.labels missing");
  }
  for (auto it = raw->begin(); it != raw->end(); ++it) {
    if (it.value().is_string()) labels[it.key()] = it.value().get<std::string>();
  }
  return labels;
}

absl::StatusOr<absl::Time> ReadTime(const std::string& text, const std::string& what) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return absl::InvalidArgumentError(what + ": not an RFC 3339 time: \"" + text + "\"");
  }
  return t;
}

}  // namespace

json RenderPod(const v1::TrainingJob& job, const std::string& namespace_name,
               const DesiredReplica& replica) {
  json env = json::array();
  for (const auto& [name, value] : replica.env) env.push_back({{"name", name}, {"value", value}});
  // The runtime sizes its thread pool to the container (cpu_budget.h): its
  // CPU request, as the pod finally has it, templates included.
  env.push_back(
      {{"name", cpu_budget::kCpuRequestEnv},
       {"valueFrom",
        {{"resourceFieldRef",
          {{"containerName", kContainerName}, {"resource", "requests.cpu"}, {"divisor", "1m"}}}}}});
  json requests = json::object(), limits = json::object();
  if (replica.resources.cpu > 0) requests["cpu"] = CpuQuantity(replica.resources.cpu);
  if (replica.resources.memory_mib > 0) {
    requests["memory"] = std::to_string(replica.resources.memory_mib) + "Mi";
    limits["memory"] = std::to_string(replica.resources.memory_mib) + "Mi";
  }
  if (replica.resources.gpus > 0) {
    // Extended resources must be requested in limits (requests default to
    // them).
    limits["nvidia.com/gpu"] = std::to_string(replica.resources.gpus);
  }
  json container = {
      {"name", kContainerName},
      {"image", replica.image},
      {"command", replica.command},
      {"args", replica.args},
      {"env", env},
      {"ports",
       json::array(
           {{{"name", "kubetrain"}, {"containerPort", replica.port}, {"protocol", "TCP"}}})},
      {"resources", {{"requests", requests}, {"limits", limits}}},
      // A crash's last log lines become the termination message, which the
      // reconciler quotes ("worker-2 exited with code 1: <message>").
      {"terminationMessagePolicy", "FallbackToLogsOnError"},
      {"securityContext",
       {{"allowPrivilegeEscalation", false}, {"capabilities", {{"drop", json::array({"ALL"})}}}}},
  };
  // Neither given: the image's ENTRYPOINT and CMD run; args alone replace
  // the CMD (DesiredReplica::command).
  if (replica.command.empty()) container.erase("command");
  if (replica.command.empty() && replica.args.empty()) container.erase("args");
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", Metadata(job, namespace_name, replica)},
      {"spec",
       {{"restartPolicy",
         replica.restart_policy == ContainerRestartPolicy::kOnFailure ? "OnFailure" : "Never"},
        {"hostname", replica.name},
        {"securityContext", {{"seccompProfile", {{"type", "RuntimeDefault"}}}}},
        {"containers", json::array({container})}}},
  };
  if (!replica.image_pull_policy.empty()) {
    pod["spec"]["containers"][0]["imagePullPolicy"] = replica.image_pull_policy;
  }
  AddOutputMount(pod, job);
  AddPackageMounts(pod, replica);
  AddMetricsSidecar(pod, replica);
  if (job.spec().has_template_()) ApplyTemplate(pod, StructToJson(job.spec().template_()));
  // Keyed by role name; the master's also as "chief".
  const auto& templates = job.spec().replica_templates();
  auto role_template = templates.find(std::string(api::RoleName(replica.key.role)));
  if (role_template == templates.end() && replica.key.role == api::Role::kMaster) {
    role_template = templates.find("chief");
  }
  if (role_template != templates.end()) ApplyTemplate(pod, StructToJson(role_template->second));
  // Training never calls the API: no credentials, unless a template names a
  // service account (or says otherwise), which is then the user's choice.
  json& spec = pod["spec"];
  MarkNonRoot(spec, replica);
  if (!spec.contains("automountServiceAccountToken") && !spec.contains("serviceAccountName") &&
      !spec.contains("serviceAccount")) {
    spec["automountServiceAccountToken"] = false;
  }
  // Never overridable: what the operator selects and garbage-collects by.
  pod["metadata"]["name"] = replica.name;
  pod["metadata"]["namespace"] = namespace_name;
  pod["metadata"]["ownerReferences"] = json::array({OwnerReference(job)});
  for (const auto& [k, v] : replica.labels) pod["metadata"]["labels"][k] = v;
  AddPodGroupMembership(job, replica.key.trial_id, pod);
  return pod;
}

json RenderService(const v1::TrainingJob& job, const std::string& namespace_name,
                   const DesiredReplica& replica) {
  json selector = json::object();
  for (const auto& [k, v] : replica.labels) selector[k] = v;
  return {
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", Metadata(job, namespace_name, replica)},
      {"spec",
       {{"clusterIP", "None"},
        {"publishNotReadyAddresses", true},
        {"selector", selector},
        {"ports", json::array({{{"name", "kubetrain"},
                                {"port", replica.port},
                                {"targetPort", replica.port},
                                {"protocol", "TCP"}}})}}},
  };
}

json RenderOutputClaim(const v1::TrainingJob& job, const std::string& namespace_name) {
  const v1::NewOutputClaim& claim = job.spec().output_storage().new_claim();
  const std::string job_label = JobLabelValue(JobObjectName(job));
  const v1::NewOutputClaim::AccessMode mode =
      claim.access_mode() == v1::NewOutputClaim::ACCESS_MODE_UNSPECIFIED
          ? v1::NewOutputClaim::ReadWriteMany
          : claim.access_mode();
  json spec = {{"accessModes", json::array({v1::NewOutputClaim::AccessMode_Name(mode)})},
               {"resources", {{"requests", {{"storage", claim.size()}}}}}};
  if (claim.has_storage_class_name()) spec["storageClassName"] = claim.storage_class_name();
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata",
           {{"name", NewOutputClaimName(job)},
            {"namespace", namespace_name},
            {"labels", {{kLabelJobName, job_label}}},
            {"ownerReferences", json::array({OwnerReference(job)})}}},
          {"spec", spec}};
}

absl::StatusOr<ObservedReplica> ParsePod(const json& pod) {
  ObservedReplica r;
  const json* metadata = Field(pod, "metadata");
  if (metadata == nullptr) return absl::InvalidArgumentError("pod: metadata missing");
  r.name = StringField(*metadata, "name");
  if (r.name.empty()) return absl::InvalidArgumentError("pod: metadata.name missing");
  const std::string what = "pod " + r.name;
  absl::StatusOr<std::map<std::string, std::string>> labels = ReadLabels(pod, what);
  if (!labels.ok()) return labels.status();
  std::optional<ReplicaKey> key = ReplicaKeyFromLabels(*labels);
  if (!key) {
    return absl::InvalidArgumentError(what + ": labels " + kLabelReplicaType + "/" +
                                      kLabelReplicaIndex + " missing or malformed");
  }
  r.key = *key;
  if (std::string created = StringField(*metadata, "creationTimestamp"); !created.empty()) {
    absl::StatusOr<absl::Time> t = ReadTime(created, what + ": metadata.creationTimestamp");
    if (!t.ok()) return t.status();
    r.created = *t;
  }
  if (std::string deletion = StringField(*metadata, "deletionTimestamp"); !deletion.empty()) {
    absl::StatusOr<absl::Time> t = ReadTime(deletion, what + ": metadata.deletionTimestamp");
    if (!t.ok()) return t.status();
    r.deletion_requested = true;
    r.deletion_time = *t;
  }

  const json* status = Field(pod, "status");
  if (status == nullptr) return r;  // just created: Pending
  const std::string phase = StringField(*status, "phase");
  if (phase == "Running") {
    r.phase = ReplicaPhase::kRunning;
  } else if (phase == "Succeeded") {
    r.phase = ReplicaPhase::kSucceeded;
  } else if (phase == "Failed") {
    r.phase = ReplicaPhase::kFailed;
  } else if (phase == "Unknown") {
    r.phase = ReplicaPhase::kUnknown;
  } else if (phase.empty() || phase == "Pending") {
    r.phase = ReplicaPhase::kPending;
  } else {
    return absl::InvalidArgumentError(what + ": status.phase \"" + phase + "\" is not a pod phase");
  }
  r.reason = StringField(*status, "reason");
  r.node_lost = r.reason == "NodeLost";
  const std::string pod_message = StringField(*status, "message");

  const json* statuses = Field(*status, "containerStatuses");
  const json* main = nullptr;
  if (statuses != nullptr && statuses->is_array()) {
    for (const json& s : *statuses) {
      if (StringField(s, "name") == kContainerName) main = &s;
    }
    if (main == nullptr && !statuses->empty()) main = &(*statuses)[0];
  }
  if (main != nullptr) {
    if (const json* restarts = Field(*main, "restartCount");
        restarts != nullptr && restarts->is_number_integer()) {
      r.container_restarts =
          static_cast<int>(std::clamp<int64_t>(restarts->get<int64_t>(), 0, INT32_MAX));
    }
    const json* current = Field(*main, "state");
    const json* last = Field(*main, "lastState");
    // `kind` (running, terminated) of `state`, when it is that kind.
    auto of_kind = [](const json* state, const char* kind) {
      return state == nullptr ? nullptr : Field(*state, kind);
    };
    // A time of the container's status into *out; absent leaves it.
    auto read_time = [&](const json* of, const char* kind, const char* field,
                         absl::Time* out) -> absl::Status {
      const std::string text = of == nullptr ? "" : StringField(*of, field);
      if (text.empty()) return absl::OkStatus();
      ASSIGN_OR_RETURN(*out, ReadTime(text, what + ": containerStatuses." + kind + "." + field));
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(read_time(of_kind(current, "running"), "running", "startedAt", &r.run_since));
    RETURN_IF_ERROR(
        read_time(of_kind(current, "terminated"), "terminated", "finishedAt", &r.finished));
    // Waiting to run again: this run begins after the last one ended.
    if (of_kind(current, "waiting") != nullptr) {
      RETURN_IF_ERROR(
          read_time(of_kind(last, "terminated"), "terminated", "finishedAt", &r.run_since));
    }
    const json* terminated = nullptr;
    for (const json* state : {current, last}) {
      const json* t = of_kind(state, "terminated");
      if (t != nullptr && t->is_object()) {
        terminated = t;
        break;
      }
    }
    if (terminated != nullptr) {
      if (const json* code = Field(*terminated, "exitCode");
          code != nullptr && code->is_number_integer()) {
        r.exit_code =
            static_cast<int>(std::clamp<int64_t>(code->get<int64_t>(), INT32_MIN, INT32_MAX));
      }
      r.termination_message = StringField(*terminated, "message");
      if (r.reason.empty()) r.reason = StringField(*terminated, "reason");
    }
  }
  if (r.termination_message.empty()) r.termination_message = pod_message;
  r.waiting = ReadPodWaiting(pod, kContainerName);
  // Trailing newlines of log-derived messages add nothing to a status line.
  while (!r.termination_message.empty() &&
         (r.termination_message.back() == '\n' || r.termination_message.back() == ' ')) {
    r.termination_message.pop_back();
  }
  return r;
}

absl::StatusOr<ObservedService> ParseService(const json& service) {
  ObservedService s;
  const json* metadata = Field(service, "metadata");
  if (metadata == nullptr) return absl::InvalidArgumentError("service: metadata missing");
  s.name = StringField(*metadata, "name");
  if (s.name.empty()) return absl::InvalidArgumentError("service: metadata.name missing");
  absl::StatusOr<std::map<std::string, std::string>> labels =
      ReadLabels(service, "service " + s.name);
  if (!labels.ok()) return labels.status();
  std::optional<ReplicaKey> key = ReplicaKeyFromLabels(*labels);
  if (!key) {
    return absl::InvalidArgumentError("service " + s.name + ": labels " + kLabelReplicaType + "/" +
                                      kLabelReplicaIndex + " missing or malformed");
  }
  s.key = *key;
  return s;
}

absl::StatusOr<std::vector<json>> RenderJob(const v1::TrainingJob& job,
                                            const std::string& namespace_name, int trial,
                                            const ReconcileOptions& options) {
  if (std::vector<api::FieldError> errors = api::Validate(job, {.runtimes = &Runtimes(options)});
      !errors.empty()) {
    return absl::InvalidArgumentError(api::FormatErrors(errors));
  }
  v1::TrainingJob defaulted = Normalize(job);
  defaulted.mutable_metadata()->set_namespace_(namespace_name);
  ReconcileOptions render_options = options;
  render_options.address = KubernetesAddresses(namespace_name);

  std::string trial_id;
  tuner::Assignment assignment;
  const v1::HyperparameterSpec& spec = defaulted.spec().training_input().hyperparameters();
  if (spec.params_size() > 0) {
    if (trial < 1) {
      return absl::InvalidArgumentError("trial must be >= 1 for a tuning job, got " +
                                        std::to_string(trial));
    }
    const uint64_t seed = StableHash(defaulted.metadata().uid());
    absl::StatusOr<std::unique_ptr<tuner::Tuner>> tuner = options.tuner_factory
                                                              ? options.tuner_factory(spec, seed)
                                                              : tuner::Tuner::Create(spec, seed);
    if (!tuner.ok()) return tuner.status();
    if (*tuner == nullptr) return absl::InternalError("the tuner factory returned no tuner");
    // Trials before `trial` count as running: what the operator would
    // suggest with maxParallelTrials >= trial.
    std::vector<tuner::TrialRecord> history;
    for (int i = 1; i <= trial; ++i) {
      std::vector<tuner::Assignment> next = (*tuner)->Suggest(history, 1);
      if (next.empty()) {
        return absl::OutOfRangeError("the search space is exhausted after " +
                                     std::to_string(i - 1) + " trials");
      }
      tuner::TrialRecord record;
      record.trial_id = std::to_string(i);
      record.assignment = next[0];
      record.status = tuner::TrialRecord::Status::kRunning;
      history.push_back(record);
    }
    trial_id = std::to_string(trial);
    assignment = history.back().assignment;
  }

  std::vector<json> objects;
  if (!NewOutputClaimName(defaulted).empty()) {
    objects.push_back(RenderOutputClaim(defaulted, namespace_name));
  }
  const std::vector<DesiredReplica> replicas =
      DesiredReplicas(defaulted, trial_id, assignment, render_options);
  std::vector<json> pods;
  for (const DesiredReplica& replica : replicas) {
    pods.push_back(RenderPod(defaulted, namespace_name, replica));
  }
  // A gang scheduler's PodGroup goes before the pods that name it.
  if (json group = RenderPodGroup(defaulted, namespace_name, trial_id, pods); !group.is_null()) {
    objects.push_back(std::move(group));
  }
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (render_options.services) {
      objects.push_back(RenderService(defaulted, namespace_name, replicas[i]));
    }
    objects.push_back(std::move(pods[i]));
  }
  return objects;
}

}  // namespace kubetrain::core
