#include "api/scale_tiers.h"

#include "api/defaults.h"

namespace kubetrain::api {
namespace {

// Cloud ML Engine's legacy machine names plus the Compute Engine names it
// accepted later. Requests are what a pod asks for; GPUs become
// nvidia.com/gpu limits. Documented in docs/scale-tiers.md.
const std::vector<MachineResources>& Table() {
  static const auto* table = new std::vector<MachineResources>{
      {"standard", 4, 15 * 1024, 0},
      {"large_model", 8, 52 * 1024, 0},
      {"complex_model_s", 8, 7 * 1024, 0},
      {"complex_model_m", 16, 14 * 1024, 0},
      {"complex_model_l", 32, 28 * 1024, 0},
      {"standard_gpu", 8, 30 * 1024, 1},
      {"complex_model_m_gpu", 16, 60 * 1024, 4},
      {"complex_model_l_gpu", 32, 120 * 1024, 8},
      {"standard_p100", 8, 30 * 1024, 1},
      {"complex_model_m_p100", 16, 60 * 1024, 4},
      {"standard_v100", 8, 30 * 1024, 1},
      {"large_model_v100", 16, 104 * 1024, 1},
      {"complex_model_m_v100", 16, 60 * 1024, 4},
      {"complex_model_l_v100", 32, 120 * 1024, 8},
      {"n1-standard-4", 4, 15 * 1024, 0},
      {"n1-standard-8", 8, 30 * 1024, 0},
      {"n1-standard-16", 16, 60 * 1024, 0},
      {"n1-standard-32", 32, 120 * 1024, 0},
      {"n1-standard-64", 64, 240 * 1024, 0},
      {"n1-standard-96", 96, 360 * 1024, 0},
      {"n1-highmem-2", 2, 13 * 1024, 0},
      {"n1-highmem-4", 4, 26 * 1024, 0},
      {"n1-highmem-8", 8, 52 * 1024, 0},
      {"n1-highmem-16", 16, 104 * 1024, 0},
      {"n1-highmem-32", 32, 208 * 1024, 0},
      {"n1-highmem-64", 64, 416 * 1024, 0},
      {"n1-highmem-96", 96, 624 * 1024, 0},
      {"n1-highcpu-16", 16, 14 * 1024, 0},
      {"n1-highcpu-32", 32, 28 * 1024, 0},
      // Compute Engine sizes these at 0.9 GB per vCPU: 57.6 and 86.4 GiB.
      {"n1-highcpu-64", 64, 58982, 0},
      {"n1-highcpu-96", 96, 88474, 0},
      // Asks for nothing itself: the replica's pod template says what it
      // needs (what a converted Kubeflow manifest carries). Any other type's
      // requests would stay under a template that sets only some of them.
      {"pod-template", 0, 0, 0},
  };
  return *table;
}

struct TierLayout {
  const char* master;
  int64_t workers;
  const char* worker;
  int64_t parameter_servers;
  const char* parameter_server;
};

TierLayout LayoutOf(v1::TrainingInput::ScaleTier tier) {
  switch (tier) {
    case v1::TrainingInput::STANDARD_1:
      return {"standard", 4, "standard", 3, "standard"};
    case v1::TrainingInput::PREMIUM_1:
      return {"complex_model_l", 19, "complex_model_l", 11, "large_model"};
    case v1::TrainingInput::BASIC_GPU:
      return {"standard_gpu", 0, "", 0, ""};
    default:  // BASIC (and unspecified, which defaults to BASIC)
      return {"standard", 0, "", 0, ""};
  }
}

ReplicaGroup MakeGroup(Role role, int64_t count, const std::string& machine_type,
                       const v1::ReplicaConfig& config) {
  ReplicaGroup group{role, count, {}, config};
  if (std::optional<MachineResources> resources = LookupMachineType(machine_type)) {
    group.resources = *resources;
  } else {
    group.resources.machine_type = machine_type;
  }
  if (config.accelerator_config().has_count()) {
    group.resources.gpus = config.accelerator_config().count();
  }
  return group;
}

}  // namespace

const std::vector<MachineResources>& MachineTypes() { return Table(); }

std::optional<MachineResources> LookupMachineType(std::string_view machine_type) {
  for (const MachineResources& entry : Table()) {
    if (entry.machine_type == machine_type) return entry;
  }
  return std::nullopt;
}

std::vector<ReplicaGroup> ReplicaGroups(const v1::TrainingInput& input) {
  std::vector<ReplicaGroup> groups;
  if (input.scale_tier() == v1::TrainingInput::CUSTOM) {
    groups.push_back(MakeGroup(Role::kMaster, 1, input.master_type(), input.master_config()));
    if (input.worker_count() > 0) {
      groups.push_back(MakeGroup(Role::kWorker, input.worker_count(), input.worker_type(),
                                 input.worker_config()));
    }
    if (input.parameter_server_count() > 0) {
      groups.push_back(MakeGroup(Role::kParameterServer, input.parameter_server_count(),
                                 input.parameter_server_type(), input.parameter_server_config()));
    }
  } else {
    const TierLayout layout = LayoutOf(input.scale_tier());
    groups.push_back(MakeGroup(Role::kMaster, 1, layout.master, input.master_config()));
    if (layout.workers > 0) {
      groups.push_back(
          MakeGroup(Role::kWorker, layout.workers, layout.worker, input.worker_config()));
    }
    if (layout.parameter_servers > 0) {
      groups.push_back(MakeGroup(Role::kParameterServer, layout.parameter_servers,
                                 layout.parameter_server, input.parameter_server_config()));
    }
  }
  if (input.evaluator_count() > 0) {
    const std::string type =
        input.evaluator_type().empty() ? groups[0].resources.machine_type : input.evaluator_type();
    groups.push_back(
        MakeGroup(Role::kEvaluator, input.evaluator_count(), type, input.evaluator_config()));
  }
  return groups;
}

std::vector<ReplicaGroup> ImageEntrypointGroups(const v1::TrainingJob& job) {
  v1::TrainingJob defaulted = job;
  ApplyDefaults(&defaulted);
  const v1::TrainingInput& input = defaulted.spec().training_input();
  std::vector<ReplicaGroup> groups = ReplicaGroups(input);
  std::erase_if(
      groups, [&](const ReplicaGroup& group) { return !RunsImageEntrypoint(input, group.config); });
  return groups;
}

}  // namespace kubetrain::api
