#include "api/kubeflow.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/codec.h"
#include "api/scale_tiers.h"
#include "api/template_placeholder.h"
#include "api/validation.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace kubetrain::api {
namespace {

using nlohmann::json;

constexpr char kGroupPrefix[] = "kubeflow.org/";
constexpr char kVersion[] = "kubeflow.org/v1";
// The machine type whose pods ask for nothing but what their template says.
constexpr char kTemplateMachine[] = "pod-template";
// The training container's name in kubetrain's pods (core::kContainerName;
// api sits below operator/core, so it is spelled here too).
constexpr char kTrainingContainer[] = "kubetrain";
constexpr char kGpuResource[] = "nvidia.com/gpu";
// GKE's node label for the GPU model, and the models it names.
constexpr char kGkeAcceleratorLabel[] = "cloud.google.com/gke-accelerator";

// What differs between the two kinds.
struct Kind {
  std::string name;                // "TFJob"
  std::string specs_field;         // "tfReplicaSpecs"
  std::string container;           // the training container's name: "tensorflow"
  std::string port_name;           // "tfjob-port"
  int default_port;                // 2222
  std::string restart_policy;      // the replicas' default restartPolicy
  std::vector<std::string> types;  // replica types, Kubeflow's spelling
  v1::TrainingInput::Framework framework;
};

const Kind& TfJob() {
  static const Kind* kind = new Kind{"TFJob",
                                     "tfReplicaSpecs",
                                     "tensorflow",
                                     "tfjob-port",
                                     2222,
                                     "Never",
                                     {"Chief", "Master", "Worker", "PS", "Evaluator"},
                                     v1::TrainingInput::TENSORFLOW};
  return *kind;
}

const Kind& PyTorchJob() {
  static const Kind* kind = new Kind{"PyTorchJob",
                                     "pytorchReplicaSpecs",
                                     "pytorch",
                                     "pytorchjob-port",
                                     23456,
                                     "OnFailure",
                                     {"Master", "Worker"},
                                     v1::TrainingInput::PYTORCH};
  return *kind;
}

std::string Quoted(const json& value) {
  if (value.is_string()) return "\"" + value.get<std::string>() + "\"";
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// object[key] when it is a string, else "" (nlohmann's value() throws on
// other types, and the input is anyone's).
std::string StringAt(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// An integer written as a YAML number (Struct keeps numbers as doubles).
std::optional<int64_t> IntegerOf(const json& value) {
  if (!value.is_number()) return std::nullopt;
  const double d = value.get<double>();
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return std::nullopt;
  return static_cast<int64_t>(d);
}

// A count written as a number or a string ("2"), as Kubernetes quantities of
// nvidia.com/gpu are.
std::optional<int64_t> CountOf(const json& value) {
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (s.empty() || s.size() > 6) return std::nullopt;
    int64_t n = 0;
    for (char c : s) {
      if (!absl::ascii_isdigit(c)) return std::nullopt;
      n = n * 10 + (c - '0');
    }
    return n;
  }
  std::optional<int64_t> n = IntegerOf(value);
  if (n && *n < 0) return std::nullopt;
  return n;
}

v1::AcceleratorConfig::AcceleratorType GpuModel(const std::string& gke_label) {
  static const auto* models = new std::map<std::string, v1::AcceleratorConfig::AcceleratorType>{
      {"nvidia-tesla-k80", v1::AcceleratorConfig::NVIDIA_TESLA_K80},
      {"nvidia-tesla-p100", v1::AcceleratorConfig::NVIDIA_TESLA_P100},
      {"nvidia-tesla-v100", v1::AcceleratorConfig::NVIDIA_TESLA_V100},
      {"nvidia-tesla-p4", v1::AcceleratorConfig::NVIDIA_TESLA_P4},
      {"nvidia-tesla-t4", v1::AcceleratorConfig::NVIDIA_TESLA_T4},
      {"nvidia-tesla-a100", v1::AcceleratorConfig::NVIDIA_TESLA_A100},
      {"nvidia-a100-80gb", v1::AcceleratorConfig::NVIDIA_A100_80GB},
      {"nvidia-h100-80gb", v1::AcceleratorConfig::NVIDIA_H100_80GB},
      {"nvidia-h200-141gb", v1::AcceleratorConfig::NVIDIA_H200_141GB},
      {"nvidia-l4", v1::AcceleratorConfig::NVIDIA_L4},
  };
  auto it = models->find(gke_label);
  return it == models->end() ? v1::AcceleratorConfig::NVIDIA_GPU : it->second;
}

// One Kubeflow replica spec (spec.<kind>ReplicaSpecs.<Type>), converted.
struct Replica {
  std::string type;  // canonical: "Chief", "Master", "Worker", "PS", "Evaluator"
  std::string path;  // "spec.tfReplicaSpecs.Worker" (the key as written)
  int64_t replicas = 1;
  std::string restart_policy;
  std::string restart_policy_path;  // empty when defaulted
  v1::ReplicaConfig config;
  json template_ = json::object();  // what goes to spec.replicaTemplates
  int port = 0;
  std::string port_path;  // empty when defaulted
};

class Converter {
 public:
  Converter(const DecodedDocument& document, KubeflowConversion* out)
      : root_(document.value), positions_(document.positions), out_(out) {}

  void Run() {
    const std::string api_version = StringAt(root_, "apiVersion");
    if (api_version != kVersion) {
      Error("apiVersion",
            absl::StrCat("only ", kVersion, " manifests convert, got \"", api_version, "\""));
      return;
    }
    const json& kind = At(root_, "kind");
    const std::string kind_name = kind.is_string() ? kind.get<std::string>() : "";
    out_->kind = kind_name;
    if (kind_name == TfJob().name) {
      kind_ = &TfJob();
    } else if (kind_name == PyTorchJob().name) {
      kind_ = &PyTorchJob();
    } else {
      Error("kind", absl::StrCat(kind_name.empty() ? "missing" : "\"" + kind_name + "\"",
                                 ": no TrainingJob equivalent; TFJob and PyTorchJob convert"));
      return;
    }
    v1::TrainingJob& job = out_->job;
    job.set_api_version("kubetrain.io/v1");
    job.set_kind("TrainingJob");
    input_ = job.mutable_spec()->mutable_training_input();
    input_->set_scale_tier(v1::TrainingInput::CUSTOM);
    input_->set_framework(kind_->framework);
    Map("kind", absl::StrCat("spec.trainingInput.framework: ",
                             v1::TrainingInput::Framework_Name(kind_->framework)));

    for (const auto& [key, value] : root_.items()) {
      if (key == "apiVersion" || key == "kind") continue;
      if (key == "metadata") {
        Metadata(value);
      } else if (key == "spec") {
        Spec(value);
      } else if (key == "status") {
        Map("status", "left out: the operator writes the TrainingJob's status");
      } else {
        Error(key, "unknown field of a " + kind_->name);
      }
    }
    if (!root_.contains("spec")) Error("spec", "required");
  }

 private:
  static const json& At(const json& object, const std::string& key) {
    static const json* null = new json();
    if (!object.is_object()) return *null;
    auto it = object.find(key);
    return it == object.end() ? *null : *it;
  }

  void Error(const std::string& path, std::string reason) {
    FieldError error{path, std::move(reason)};
    // The longest decoded prefix of the path has the position.
    std::string prefix = path;
    while (!prefix.empty()) {
      if (auto it = positions_.find(prefix); it != positions_.end()) {
        error.line = it->second.first;
        error.column = it->second.second;
        break;
      }
      const size_t cut = prefix.find_last_of(".[");
      if (cut == std::string::npos) break;
      prefix.resize(cut);
    }
    out_->errors.push_back(std::move(error));
  }

  void Map(std::string from, std::string to) {
    out_->mapped.push_back({std::move(from), std::move(to)});
  }

  // An integer from `low` to INT32_MAX, else an error at `path`.
  std::optional<int32_t> Int32Of(const json& value, int64_t low, const std::string& path) {
    std::optional<int64_t> n = IntegerOf(value);
    if (!n || *n < low || *n > INT32_MAX) {
      Error(path, absl::StrCat("expected an integer >= ", low, ", got ", Quoted(value)));
      return std::nullopt;
    }
    return static_cast<int32_t>(*n);
  }

  std::optional<std::string> StringOf(const json& value, const std::string& path) {
    if (!value.is_string()) {
      Error(path, "expected a string, got " + Quoted(value));
      return std::nullopt;
    }
    return value.get<std::string>();
  }

  bool ExpectObject(const json& value, const std::string& path) {
    if (value.is_object()) return true;
    Error(path, "expected a mapping, got " + Quoted(value));
    return false;
  }

  // ---- metadata

  void Metadata(const json& metadata) {
    if (!ExpectObject(metadata, "metadata")) return;
    v1::ObjectMeta* meta = out_->job.mutable_metadata();
    for (const auto& [key, value] : metadata.items()) {
      const std::string path = "metadata." + key;
      if (key == "name" || key == "namespace") {
        if (!value.is_string()) {
          Error(path, "expected a string, got " + Quoted(value));
          continue;
        }
        key == "name" ? meta->set_name(value.get<std::string>())
                      : meta->set_namespace_(value.get<std::string>());
        Map(path, path);
      } else if (key == "labels" || key == "annotations") {
        if (!ExpectObject(value, path)) continue;
        auto* target = key == "labels" ? meta->mutable_labels() : meta->mutable_annotations();
        for (const auto& [name, text] : value.items()) {
          if (!text.is_string()) {
            Error(path + "." + name, "expected a string, got " + Quoted(text));
            continue;
          }
          (*target)[name] = text.get<std::string>();
        }
        Map(path, path);
      } else if (key == "uid" || key == "resourceVersion" || key == "generation" ||
                 key == "creationTimestamp" || key == "managedFields" || key == "selfLink") {
        // What `kubectl get -o yaml` adds: the API server sets it again.
        Map(path, "left out: set by the API server");
      } else if (key == "generateName") {
        if (!value.is_string()) {
          Error(path, "expected a string, got " + Quoted(value));
          continue;
        }
        meta->set_generate_name(value.get<std::string>());
        Map(path,
            "metadata.generateName (create the job with `kubectl create`; `kubectl "
            "apply` needs a name)");
      } else {
        Error(path, "no TrainingJob equivalent");
      }
    }
  }

  // ---- spec

  void Spec(const json& spec) {
    if (!ExpectObject(spec, "spec")) return;
    v1::RunPolicy* policy = out_->job.mutable_spec()->mutable_run_policy();
    // Kubeflow's default, where kubetrain's own is Running.
    policy->set_clean_pod_policy(v1::RunPolicy::None);
    bool clean_pod_policy_given = false;
    for (const auto& [key, value] : spec.items()) {
      const std::string path = "spec." + key;
      if (key == kind_->specs_field) {
        ReplicaSpecs(value, path);
      } else if (key == "runPolicy") {
        if (!ExpectObject(value, path)) continue;
        for (const auto& [field, setting] : value.items()) {
          clean_pod_policy_given |= field == "cleanPodPolicy";
          RunPolicyField(field, setting, path + "." + field, policy);
        }
      } else if (key == "cleanPodPolicy" || key == "ttlSecondsAfterFinished" ||
                 key == "activeDeadlineSeconds" || key == "backoffLimit") {
        // The v1 API before runPolicy had these directly under spec.
        clean_pod_policy_given |= key == "cleanPodPolicy";
        RunPolicyField(key, value, path, policy);
      } else if (key == "successPolicy" && kind_ == &TfJob()) {
        if (value.is_null() || value == "") {
          Map(path, "the default: the job succeeds when its master (else worker 0) does");
        } else {
          Error(path, "no equivalent for " + Quoted(value) +
                          ": a TrainingJob succeeds when its master (else worker 0) does");
        }
      } else if (key == "enableDynamicWorker" && kind_ == &TfJob()) {
        if (value == true) {
          Error(path, "no equivalent: a TrainingJob has a fixed set of workers");
        } else {
          Map(path, "false: nothing to map");
        }
      } else if (key == "elasticPolicy" && kind_ == &PyTorchJob()) {
        ElasticPolicy(value, path);
      } else if (key == "nprocPerNode" && kind_ == &PyTorchJob()) {
        nproc_per_node_ = value;
        nproc_per_node_path_ = path;
      } else {
        Error(path, "unknown field of a " + kind_->name + " spec");
      }
    }
    if (!clean_pod_policy_given) {
      Map("spec.runPolicy.cleanPodPolicy (unset)",
          "spec.runPolicy.cleanPodPolicy: None (Kubeflow's default)");
    }
    if (!spec.contains(kind_->specs_field)) Error("spec." + kind_->specs_field, "required");
    if (!policy->has_backoff_limit()) {
      Map("spec.runPolicy.backoffLimit (unset)",
          "kubetrain's default 3 restarts (Kubeflow sets no limit)");
    }
  }

  // Kubeflow's elasticPolicy is kubetrain's spec.elasticPolicy, field for
  // field, but for autoscaling (metrics: kubetrain runs the workers given).
  void ElasticPolicy(const json& value, const std::string& path) {
    if (!ExpectObject(value, path)) return;
    v1::ElasticPolicy* elastic = out_->job.mutable_spec()->mutable_elastic_policy();
    for (auto entry = value.begin(); entry != value.end(); ++entry) {
      const std::string field = entry.key();
      const json& item = entry.value();
      const std::string item_path = path + "." + field;
      const std::string target = "spec.elasticPolicy." + field;
      std::string mapped;  // what the field became
      if (field == "minReplicas" || field == "maxReplicas" || field == "maxRestarts" ||
          field == "rdzvPort") {
        std::optional<int32_t> n = Int32Of(item, field == "maxRestarts" ? 0 : 1, item_path);
        if (!n) continue;
        if (field == "minReplicas") elastic->set_min_replicas(*n);
        if (field == "maxReplicas") elastic->set_max_replicas(*n);
        if (field == "maxRestarts") elastic->set_max_restarts(*n);
        if (field == "rdzvPort") elastic->set_rdzv_port(*n);
        mapped = std::to_string(*n);
      } else if (field == "rdzvBackend" || field == "rdzvHost" || field == "rdzvId") {
        std::optional<std::string> s = StringOf(item, item_path);
        if (!s) continue;
        if (field == "rdzvBackend") elastic->set_rdzv_backend(*s);
        if (field == "rdzvHost") elastic->set_rdzv_host(*s);
        if (field == "rdzvId") elastic->set_rdzv_id(*s);
        mapped = *s;
      } else if (field == "rdzvConf") {
        RendezvousConf(item, item_path, elastic);
        continue;
      } else if (field == "nProcPerNode") {
        // Kubeflow's older place for spec.nprocPerNode.
        nproc_per_node_ = item;
        nproc_per_node_path_ = item_path;
        continue;
      } else if (field == "standalone") {
        if (item != false) {
          Error(item_path,
                "no equivalent: a standalone rendezvous is one node's own; the "
                "nodes of a TrainingJob rendezvous at the master (or rdzvHost)");
        } else {
          Map(item_path, "false: nothing to map");
        }
        continue;
      } else if (field == "metrics") {
        Error(item_path,
              "no equivalent: kubetrain does not autoscale (no HorizontalPodAutoscaler); it "
              "runs the replicas given, and the group goes on while minReplicas remain. Remove "
              "metrics to run it so");
        continue;
      } else {
        Error(item_path, "unknown field of an elasticPolicy");
        continue;
      }
      Map(item_path, target + ": " + mapped);
    }
  }

  void RendezvousConf(const json& value, const std::string& path, v1::ElasticPolicy* elastic) {
    if (!value.is_array()) {
      Error(path, "expected a list of {key, value}, got " + Quoted(value));
      return;
    }
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string item_path = absl::StrCat(path, "[", i, "]");
      const json& item = value[i];
      if (!ExpectObject(item, item_path)) continue;
      const std::string key = StringAt(item, "key");
      if (key.empty() || item.size() > 2 ||
          (item.contains("value") && !item["value"].is_string())) {
        Error(item_path, "expected {key: <string>, value: <string>}, got " + Quoted(item));
        continue;
      }
      v1::ElasticPolicy::RendezvousConf* conf = elastic->add_rdzv_conf();
      conf->set_key(key);
      conf->set_value(StringAt(item, "value"));
    }
    Map(path, "spec.elasticPolicy.rdzvConf");
  }

  void RunPolicyField(const std::string& field, const json& value, const std::string& path,
                      v1::RunPolicy* policy) {
    const std::string target = "spec.runPolicy." + field;
    auto integer = [&](int64_t low, int64_t high) -> std::optional<int64_t> {
      std::optional<int64_t> n = IntegerOf(value);
      if (!n || *n < low || *n > high) {
        Error(path, "expected an integer, got " + Quoted(value));
        return std::nullopt;
      }
      return n;
    };
    if (field == "cleanPodPolicy") {
      v1::RunPolicy::CleanPodPolicy clean;
      if (!value.is_string() || value == "" ||
          !v1::RunPolicy::CleanPodPolicy_Parse(value.get<std::string>(), &clean) ||
          clean == v1::RunPolicy::CLEAN_POD_POLICY_UNSPECIFIED) {
        Error(path, "expected None, Running or All, got " + Quoted(value));
        return;
      }
      policy->set_clean_pod_policy(clean);
    } else if (field == "ttlSecondsAfterFinished") {
      std::optional<int64_t> n = integer(INT32_MIN, INT32_MAX);
      if (!n) return;
      policy->set_ttl_seconds_after_finished(static_cast<int32_t>(*n));
    } else if (field == "activeDeadlineSeconds") {
      std::optional<int64_t> n = integer(INT64_MIN, INT64_MAX);
      if (!n) return;
      policy->set_active_deadline_seconds(*n);
    } else if (field == "backoffLimit") {
      std::optional<int64_t> n = integer(INT32_MIN, INT32_MAX);
      if (!n) return;
      policy->set_backoff_limit(static_cast<int32_t>(*n));
    } else if (field == "suspend") {
      if (!value.is_boolean()) {
        Error(path, "expected true or false, got " + Quoted(value));
        return;
      }
      policy->set_suspend(value.get<bool>());
    } else if (field == "managedBy") {
      // Which controller runs the job: converting is choosing kubetrain.
      if (value != "kubeflow.org/training-operator") {
        Error(path,
              "no equivalent: kubetrain's operator runs the TrainingJob, not " + Quoted(value));
        return;
      }
      Map(path, "left out: kubetrain's operator runs the TrainingJob");
      return;
    } else if (field == "schedulingPolicy") {
      SchedulingPolicy(value, path, policy->mutable_scheduling_policy());
      return;
    } else {
      Error(path, "unknown field of a runPolicy");
      return;
    }
    Map(path,
        absl::StrCat(target, ": ", value.is_string() ? value.get<std::string>() : Quoted(value)));
  }

  // Kubeflow's gang scheduling: kubetrain's own admission, or a PodGroup for
  // the scheduler the pod templates name (docs/admission.md).
  void SchedulingPolicy(const json& value, const std::string& path, v1::SchedulingPolicy* policy) {
    if (!ExpectObject(value, path)) return;
    for (auto entry = value.begin(); entry != value.end(); ++entry) {
      const std::string field = entry.key();
      const json& item = entry.value();
      const std::string item_path = path + "." + field;
      const std::string target = "spec.runPolicy.schedulingPolicy." + field;
      auto positive = [&] { return Int32Of(item, 1, item_path); };
      auto text = [&] { return StringOf(item, item_path); };
      if (field == "minAvailable") {
        std::optional<int32_t> n = positive();
        if (!n) continue;
        policy->set_min_available(*n);
      } else if (field == "scheduleTimeoutSeconds") {
        std::optional<int32_t> n = positive();
        if (!n) continue;
        policy->set_schedule_timeout_seconds(*n);
      } else if (field == "queue") {
        std::optional<std::string> s = text();
        if (!s) continue;
        policy->set_queue(*s);
      } else if (field == "priorityClass") {
        std::optional<std::string> s = text();
        if (!s) continue;
        policy->set_priority_class(*s);
      } else if (field == "minResources") {
        if (!ExpectObject(item, item_path)) continue;
        Map(item_path,
            "left out: a PodGroup's minResources is the sum of the requests of the pods that "
            "must start together");
        continue;
      } else {
        Error(item_path, "unknown field of a schedulingPolicy");
        continue;
      }
      Map(item_path,
          absl::StrCat(target, ": ", item.is_string() ? item.get<std::string>() : Quoted(item)));
    }
  }

  // ---- replica specs

  void ReplicaSpecs(const json& specs, const std::string& path) {
    if (!ExpectObject(specs, path)) return;
    std::map<std::string, Replica> replicas;  // by canonical type
    for (const auto& [key, value] : specs.items()) {
      const std::string spec_path = path + "." + key;
      std::string type;
      for (const std::string& known : kind_->types) {
        if (absl::EqualsIgnoreCase(known, key)) type = known;
      }
      if (type.empty()) {
        Error(spec_path, absl::StrCat("unknown replica type \"", key, "\"; a ", kind_->name,
                                      " has ", absl::StrJoin(kind_->types, ", ")));
        continue;
      }
      if (replicas.count(type) > 0) {
        Error(spec_path, "replica type " + type + " given twice");
        continue;
      }
      std::optional<Replica> replica = ConvertReplica(type, value, spec_path);
      if (replica) replicas.emplace(type, *std::move(replica));
    }
    if (!out_->errors.empty()) return;
    Assemble(replicas, path);
  }

  std::optional<Replica> ConvertReplica(const std::string& type, const json& spec,
                                        const std::string& path) {
    if (!ExpectObject(spec, path)) return std::nullopt;
    Replica r;
    r.type = type;
    r.path = path;
    r.restart_policy = kind_->restart_policy;
    r.port = kind_->default_port;
    bool has_template = false;
    for (const auto& [key, value] : spec.items()) {
      const std::string field_path = path + "." + key;
      if (key == "replicas") {
        std::optional<int64_t> n = IntegerOf(value);
        if (!n || *n < 0 || *n > kMaxReplicasPerRole) {
          Error(field_path, absl::StrCat("expected a count from 0 to ", kMaxReplicasPerRole,
                                         ", got ", Quoted(value)));
          return std::nullopt;
        }
        r.replicas = *n;
      } else if (key == "restartPolicy") {
        v1::RunPolicy::RestartPolicy parsed;
        if (!value.is_string() ||
            !v1::RunPolicy::RestartPolicy_Parse(value.get<std::string>(), &parsed) ||
            parsed == v1::RunPolicy::RESTART_POLICY_UNSPECIFIED) {
          Error(field_path, "expected Always, OnFailure, Never or ExitCode, got " + Quoted(value));
          return std::nullopt;
        }
        r.restart_policy = value.get<std::string>();
        r.restart_policy_path = field_path;
      } else if (key == "template") {
        has_template = true;
        if (!ConvertTemplate(value, field_path, &r)) return std::nullopt;
      } else {
        Error(field_path, "unknown field of a replica spec (replicas, restartPolicy, template)");
        return std::nullopt;
      }
    }
    if (!has_template) {
      Error(path + ".template", "required: the pod the replicas run");
      return std::nullopt;
    }
    return r;
  }

  // Splits a PodTemplateSpec into the role's ReplicaConfig (image, command,
  // args, GPUs of the training container), the port, and the rest, which
  // kubetrain merges over the pods it renders.
  bool ConvertTemplate(const json& tmpl, const std::string& path, Replica* r) {
    if (!ExpectObject(tmpl, path)) return false;
    json out = json::object();
    for (const auto& [key, value] : tmpl.items()) {
      const std::string field_path = path + "." + key;
      if (key == "metadata") {
        if (!ExpectObject(value, field_path)) return false;
        for (const auto& [field, setting] : value.items()) {
          if (field == "labels" || field == "annotations") {
            out["metadata"][field] = setting;
          } else if (field == "creationTimestamp" && setting.is_null()) {
            // kubectl's empty placeholder.
          } else {
            Error(field_path + "." + field,
                  "no equivalent: a pod template's metadata may hold labels and annotations");
            return false;
          }
        }
      } else if (key == "spec") {
        if (!ExpectObject(value, field_path)) return false;
        json pod_spec = value;
        if (pod_spec.contains("restartPolicy")) {
          Map(field_path + ".restartPolicy",
              "left out: the replica spec's restartPolicy decides, as in Kubeflow");
          pod_spec.erase("restartPolicy");
        }
        if (!ConvertContainers(pod_spec, field_path, r)) return false;
        if (!pod_spec.empty()) out["spec"] = std::move(pod_spec);
      } else {
        Error(field_path, "unknown field of a pod template (metadata, spec)");
        return false;
      }
    }
    if (!tmpl.contains("spec")) {
      Error(path + ".spec", "required: the pod's containers");
      return false;
    }
    r->template_ = std::move(out);
    return true;
  }

  bool ConvertContainers(json& pod_spec, const std::string& path, Replica* r) {
    const std::string containers_path = path + ".containers";
    json& containers = pod_spec["containers"];
    if (!containers.is_array()) {
      Error(containers_path, "required: a list of containers");
      return false;
    }
    int training = -1;
    for (size_t i = 0; i < containers.size(); ++i) {
      if (StringAt(containers[i], "name") == kind_->container) {
        training = static_cast<int>(i);
      }
    }
    if (training < 0) {
      Error(containers_path, absl::StrCat("no container named \"", kind_->container, "\" (",
                                          kind_->name, "'s training container)"));
      return false;
    }
    const std::string c_path = absl::StrCat(containers_path, "[", training, "]");
    json container = containers[training];
    v1::ReplicaConfig& config = r->config;

    // image
    const json& image = At(container, "image");
    if (!image.is_string() || image == "") {
      Error(c_path + ".image", "required: the image the replicas run");
      return false;
    }
    config.set_image_uri(image.get<std::string>());
    Map(c_path + ".image", "spec.trainingInput." + ConfigField(r->type) + ".imageUri");
    container.erase("image");

    // command, args
    if (!container.contains("command")) {
      Map(c_path + ".command (unset)",
          "no containerCommand: the image's entrypoint runs, with the args, as in Kubeflow");
    }
    for (const char* field : {"command", "args"}) {
      const json& list = At(container, field);
      if (list.is_null()) continue;
      if (!list.is_array()) {
        Error(c_path + "." + field, "expected a list of strings, got " + Quoted(list));
        return false;
      }
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i].is_string()) {
          Error(absl::StrCat(c_path, ".", field, "[", i, "]"),
                "expected a string, got " + Quoted(list[i]));
          return false;
        }
        std::string* target = std::string(field) == "command" ? config.add_container_command()
                                                              : config.add_container_args();
        *target = list[i].get<std::string>();
      }
      Map(c_path + "." + field,
          absl::StrCat("spec.trainingInput.", ConfigField(r->type), ".",
                       std::string(field) == "command" ? "containerCommand" : "containerArgs"));
      container.erase(field);
    }

    // The job's port.
    if (container.contains("ports")) {
      json& ports = container["ports"];
      if (!ports.is_array()) {
        Error(c_path + ".ports", "expected a list, got " + Quoted(ports));
        return false;
      }
      for (size_t i = 0; i < ports.size(); ++i) {
        if (StringAt(ports[i], "name") != kind_->port_name) continue;
        const std::string port_path = absl::StrCat(c_path, ".ports[", i, "]");
        std::optional<int64_t> n = IntegerOf(At(ports[i], "containerPort"));
        if (!n || *n < 1 || *n > 65535) {
          Error(port_path + ".containerPort",
                "expected a port from 1 to 65535, got " + Quoted(At(ports[i], "containerPort")));
          return false;
        }
        r->port = static_cast<int>(*n);
        r->port_path = port_path;
        ports.erase(i);
        break;
      }
      if (ports.empty()) container.erase("ports");
    }

    // GPUs: acceleratorConfig, so that the reconciler and the PyTorch
    // environment know them; the model from GKE's node label when there is
    // one.
    std::optional<int64_t> gpus;
    if (container.contains("resources")) {
      json& resources = container["resources"];
      for (const char* kind : {"limits", "requests"}) {
        if (!resources.is_object() || !resources.contains(kind) || !resources[kind].is_object() ||
            !resources[kind].contains(kGpuResource)) {
          continue;
        }
        const std::string gpu_path = absl::StrCat(c_path, ".resources.", kind, ".", kGpuResource);
        std::optional<int64_t> n = CountOf(resources[kind][kGpuResource]);
        if (!n) {
          Error(gpu_path,
                "expected a whole number of GPUs, got " + Quoted(resources[kind][kGpuResource]));
          return false;
        }
        if (gpus && *gpus != *n) {
          Error(gpu_path, absl::StrCat("differs from the limit (", *gpus,
                                       "): Kubernetes needs both alike for GPUs"));
          return false;
        }
        gpus = n;
        resources[kind].erase(kGpuResource);
        if (resources[kind].empty()) resources.erase(kind);
      }
      if (resources.is_object() && resources.empty()) container.erase("resources");
    }
    if (gpus && *gpus > 0) {
      v1::AcceleratorConfig* accelerator = config.mutable_accelerator_config();
      accelerator->set_count(*gpus);
      const json& selector = At(pod_spec, "nodeSelector");
      const json& model = At(selector, kGkeAcceleratorLabel);
      accelerator->set_type(GpuModel(model.is_string() ? model.get<std::string>() : ""));
      Map(absl::StrCat(c_path, ".resources.limits.", kGpuResource),
          absl::StrCat(
              "spec.trainingInput.", ConfigField(r->type), ".acceleratorConfig: {count: ", *gpus,
              ", type: ", v1::AcceleratorConfig::AcceleratorType_Name(accelerator->type()), "}"));
    }

    // The rest of the container merges into kubetrain's.
    container["name"] = kTrainingContainer;
    if (container.size() > 1) {
      containers[training] = std::move(container);
    } else {
      containers.erase(static_cast<size_t>(training));
    }
    if (containers.empty()) pod_spec.erase("containers");
    return true;
  }

  static std::string ConfigField(const std::string& type) {
    if (type == "Worker") return "workerConfig";
    if (type == "PS") return "parameterServerConfig";
    if (type == "Evaluator") return "evaluatorConfig";
    return "masterConfig";
  }

  // Puts the converted replicas where a TrainingJob has them.
  void Assemble(std::map<std::string, Replica>& replicas, const std::string& path) {
    auto find = [&](const std::string& type) -> Replica* {
      auto it = replicas.find(type);
      return it == replicas.end() ? nullptr : &it->second;
    };
    Replica* chief = find("Chief");
    Replica* master = find("Master");
    Replica* worker = find("Worker");
    Replica* ps = find("PS");
    Replica* evaluator = find("Evaluator");
    if (chief != nullptr && master != nullptr) {
      Error(master->path, "a job has one master: Chief and Master are both given");
      return;
    }
    Replica* head = chief != nullptr ? chief : master;
    for (Replica* r : {chief, master}) {
      if (r != nullptr && r->replicas != 1) {
        Error(r->path + ".replicas",
              absl::StrCat("must be 1: a TrainingJob has one master, got ", r->replicas));
        return;
      }
    }
    int64_t workers = worker == nullptr ? 0 : worker->replicas;
    bool worker_is_master = false;
    if (head == nullptr) {
      if (workers == 0) {
        Error(path, absl::StrCat("nothing to train: no ",
                                 kind_ == &TfJob() ? "Chief, Master or Worker" : "Master or Worker",
                                 " replicas"));
        return;
      }
      head = worker;
      worker_is_master = true;
      --workers;
    }

    // One restart policy and one port for the whole job (roles with no
    // replicas run nothing and do not count).
    std::vector<Replica*> all;
    for (Replica* r : {head, worker, ps, evaluator}) {
      if (r == nullptr || (r != head && r->replicas == 0)) continue;
      if (std::find(all.begin(), all.end(), r) == all.end()) all.push_back(r);
    }
    for (Replica* r : all) {
      if (r->restart_policy != head->restart_policy) {
        Error(r->restart_policy_path.empty() ? r->path : r->restart_policy_path,
              absl::StrCat(r->restart_policy, " differs from ", head->type, "'s ",
                           head->restart_policy,
                           ": a TrainingJob has one restartPolicy for all its replicas"));
        return;
      }
      if (r->port != head->port) {
        Error(r->port_path.empty() ? r->path : r->port_path,
              absl::StrCat("port ", r->port, " differs from ", head->type, "'s ", head->port,
                           ": every replica of a TrainingJob listens on one port"));
        return;
      }
    }
    v1::TrainingJobSpec* spec = out_->job.mutable_spec();
    v1::RunPolicy::RestartPolicy restart = v1::RunPolicy::Never;
    v1::RunPolicy::RestartPolicy_Parse(head->restart_policy, &restart);
    spec->mutable_run_policy()->set_restart_policy(restart);
    spec->set_port(head->port);
    bool restart_given = false;
    bool port_given = false;
    for (const Replica* r : all) {
      if (!r->restart_policy_path.empty()) {
        restart_given = true;
        Map(r->restart_policy_path, "spec.runPolicy.restartPolicy: " + r->restart_policy);
      }
      if (!r->port_path.empty()) {
        port_given = true;
        Map(r->port_path, absl::StrCat("spec.port: ", r->port));
      }
    }
    if (!restart_given) {
      Map(head->path + ".restartPolicy (unset)",
          absl::StrCat("spec.runPolicy.restartPolicy: ", head->restart_policy,
                       " (Kubeflow's default)"));
    }
    if (!port_given) {
      Map(absl::StrCat(head->path, " ", kind_->port_name, " (unset)"),
          absl::StrCat("spec.port: ", head->port, " (Kubeflow's default)"));
    }

    // The master.
    input_->set_master_type(kTemplateMachine);
    *input_->mutable_master_config() = head->config;
    SetTemplate("master", head->template_);
    if (chief != nullptr) {
      input_->set_use_chief_in_tf_config(true);
      Map(chief->path, "the master; spec.trainingInput.useChiefInTfConfig: true");
    } else if (master != nullptr) {
      Map(master->path, "the master");
    } else {
      // TensorFlow's own rule: without a chief, worker 0 is the chief.
      if (kind_ == &TfJob()) input_->set_use_chief_in_tf_config(true);
      Map(worker->path,
          absl::StrCat("worker 0 becomes the master (a TrainingJob always has one)",
                       kind_ == &TfJob() ? ", chief in TF_CONFIG, as TensorFlow takes worker 0 "
                                           "of a chief-less cluster"
                                         : ", rank 0 as before",
                       workers > 0 ? absl::StrCat("; the others are spec.trainingInput."
                                                  "workerCount: ",
                                                  workers)
                                   : std::string()));
    }
    if (workers > 0) {
      input_->set_worker_type(kTemplateMachine);
      input_->set_worker_count(workers);
      *input_->mutable_worker_config() = worker->config;
      SetTemplate("worker", worker->template_);
      if (!worker_is_master) {
        Map(worker->path + ".replicas", absl::StrCat("spec.trainingInput.workerCount: ", workers));
      }
    }
    if (ps != nullptr && ps->replicas > 0) {
      input_->set_parameter_server_type(kTemplateMachine);
      input_->set_parameter_server_count(ps->replicas);
      *input_->mutable_parameter_server_config() = ps->config;
      SetTemplate("ps", ps->template_);
      Map(ps->path + ".replicas",
          absl::StrCat("spec.trainingInput.parameterServerCount: ", ps->replicas));
    }
    if (evaluator != nullptr && evaluator->replicas > 0) {
      input_->set_evaluator_type(kTemplateMachine);
      input_->set_evaluator_count(evaluator->replicas);
      *input_->mutable_evaluator_config() = evaluator->config;
      SetTemplate("evaluator", evaluator->template_);
      Map(evaluator->path + ".replicas",
          absl::StrCat("spec.trainingInput.evaluatorCount: ", evaluator->replicas));
    }
    Map(path + ".*.template",
        "spec.replicaTemplates.<role> (machine type pod-template: the "
        "template's resources are the pod's)");
    NprocPerNode();
  }

  void SetTemplate(const std::string& role, const json& tmpl) {
    if (tmpl.empty()) return;
    google::protobuf::Struct value;
    // Printed from a Struct, so it reads back.
    (void)google::protobuf::util::JsonStringToMessage(
        tmpl.dump(-1, ' ', false, json::error_handler_t::replace), &value);
    (*out_->job.mutable_spec()->mutable_replica_templates())[role] = std::move(value);
  }

  // Kubeflow's nprocPerNode (a string; a number in older manifests) is
  // spec.nprocPerNode, checked by validation.
  void NprocPerNode() {
    if (kind_ != &PyTorchJob()) return;
    if (nproc_per_node_path_.empty()) {
      Map("spec.nprocPerNode (unset: auto)",
          "PET_NPROC_PER_NODE: the replica's GPUs, 1 without GPUs (Kubeflow's auto starts one "
          "process per CPU on a node without GPUs)");
      return;
    }
    const json& value = nproc_per_node_;
    std::optional<int64_t> n = IntegerOf(value);
    if (!value.is_string() && !n) {
      Error(nproc_per_node_path_,
            "expected a number of processes, auto, gpu or cpu, got " + Quoted(value));
      return;
    }
    const std::string text = value.is_string() ? value.get<std::string>() : std::to_string(*n);
    if (std::string reason = ValidateNprocPerNode(text); !reason.empty()) {
      Error(nproc_per_node_path_, reason);
      return;
    }
    out_->job.mutable_spec()->set_nproc_per_node(text);
    Map(nproc_per_node_path_, "spec.nprocPerNode: " + text);
  }

  const json& root_;
  const std::map<std::string, std::pair<int, int>>& positions_;
  KubeflowConversion* out_;
  const Kind* kind_ = nullptr;
  v1::TrainingInput* input_ = nullptr;
  json nproc_per_node_;
  std::string nproc_per_node_path_;
};

}  // namespace

bool IsKubeflowManifest(const json& document) {
  auto api_version = document.find("apiVersion");
  return api_version != document.end() && api_version->is_string() &&
         absl::StartsWith(api_version->get<std::string>(), kGroupPrefix) &&
         StringAt(document, "kind") != "TrainingJob";
}

KubeflowConversion ConvertKubeflowJob(std::string_view text) {
  KubeflowConversion out;
  DecodedDocument document = DecodeDocument(text);
  if (!document.errors.empty()) return out;  // not for us to report: DecodeTrainingJob will
  if (!IsKubeflowManifest(document.value)) return out;
  out.kubeflow = true;
  out.placeholders = ManifestPlaceholders(document.value, document.positions);
  Converter(document, &out).Run();
  return out;
}

std::string FormatMapping(const std::vector<MappedField>& mapped) {
  std::string out;
  for (const MappedField& field : mapped)
    absl::StrAppend(&out, "  ", field.from, " -> ", field.to, "\n");
  return out;
}

}  // namespace kubetrain::api
