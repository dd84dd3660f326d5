#include "operator/core/pytorch_env.h"

#include <map>
#include <string>

#include "api/defaults.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/core/kube_objects.h"

namespace kubetrain::core {
namespace {

using api::Role;

// 1 master + `workers` workers (+ `ps` parameter servers, + `evaluators`),
// CUSTOM, job "mnist" in namespace "default".
v1::TrainingJob MasterWorkersJob(int workers, int ps = 0, int evaluators = 0) {
  v1::TrainingJob job;
  job.mutable_metadata()->set_name("mnist");
  job.mutable_metadata()->set_namespace_("default");
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
  if (evaluators > 0) input->set_evaluator_count(evaluators);
  api::ApplyDefaults(&job);
  return job;
}

// The expected list, in BuildPyTorchEnv's order.
EnvList Want(const std::string& addr, const std::string& port, int world, int rank, int nproc = 1) {
  return {{"MASTER_ADDR", addr},
          {"MASTER_PORT", port},
          {"WORLD_SIZE", std::to_string(world)},
          {"RANK", std::to_string(rank)},
          {"LOCAL_RANK", "0"},
          {"PET_MASTER_ADDR", addr},
          {"PET_MASTER_PORT", port},
          {"PET_NNODES", std::to_string(world)},
          {"PET_NODE_RANK", std::to_string(rank)},
          {"PET_NPROC_PER_NODE", std::to_string(nproc)}};
}

struct Case {
  std::string name;
  v1::TrainingJob job;
  std::vector<api::ReplicaGroup> groups;  // empty: api::ReplicaGroups(job)
  ReplicaKey task;
  EnvList want;
};

std::vector<Case> Cases() {
  v1::TrainingJob three = MasterWorkersJob(2);
  v1::TrainingJob with_ps = MasterWorkersJob(2, 1, 1);
  v1::TrainingJob chief = MasterWorkersJob(2);
  chief.mutable_spec()->mutable_training_input()->set_use_chief_in_tf_config(true);
  v1::TrainingJob port = MasterWorkersJob(1);
  port.mutable_spec()->set_port(23456);
  v1::TrainingJob gpus = MasterWorkersJob(1);
  gpus.mutable_spec()
      ->mutable_training_input()
      ->mutable_master_config()
      ->mutable_accelerator_config()
      ->set_count(4);
  gpus.mutable_spec()
      ->mutable_training_input()
      ->mutable_worker_config()
      ->mutable_accelerator_config()
      ->set_count(2);
  // A replica set without a master (ReplicaGroups always gives one; the
  // reconciler's rules allow none): worker 0 is rank 0.
  std::vector<api::ReplicaGroup> workers_only = {
      {Role::kWorker, 3, {}, {}},
      {Role::kParameterServer, 1, {}, {}},
  };
  // 2 processes per node: torchrun's 6 ranks on 3 nodes, as Kubeflow counts
  // them; torchrun's own words leave WORLD_SIZE the nodes'.
  v1::TrainingJob two_per_node = MasterWorkersJob(2);
  two_per_node.mutable_spec()->set_nproc_per_node("2");
  v1::TrainingJob auto_per_node = MasterWorkersJob(2);
  auto_per_node.mutable_spec()->set_nproc_per_node("auto");
  const std::string master = "mnist-master-0.default.svc";
  EnvList two_per_node_worker = Want(master, "2222", 6, 2, 2);
  two_per_node_worker[7].second = "3";  // PET_NNODES: still the nodes
  EnvList auto_worker = Want(master, "2222", 3, 2);
  auto_worker[9].second = "auto";
  return {
      {"nproc_per_node_multiplies_the_world",
       two_per_node,
       {},
       {"", Role::kWorker, 1},
       two_per_node_worker},
      {"nproc_per_node_auto", auto_per_node, {}, {"", Role::kWorker, 1}, auto_worker},
      {"master_is_rank_0", three, {}, {"", Role::kMaster, 0}, Want(master, "2222", 3, 0)},
      {"worker_0_is_rank_1", three, {}, {"", Role::kWorker, 0}, Want(master, "2222", 3, 1)},
      {"worker_1_is_rank_2", three, {}, {"", Role::kWorker, 1}, Want(master, "2222", 3, 2)},
      {"parameter_servers_are_no_ranks", with_ps, {}, {"", Role::kParameterServer, 0}, {}},
      {"evaluators_are_no_ranks", with_ps, {}, {"", Role::kEvaluator, 0}, {}},
      {"ps_and_evaluators_not_counted",
       with_ps,
       {},
       {"", Role::kWorker, 1},
       Want(master, "2222", 3, 2)},
      {"chief_names_the_master",
       chief,
       {},
       {"", Role::kWorker, 0},
       Want("mnist-chief-0.default.svc", "2222", 3, 1)},
      {"job_port", port, {}, {"", Role::kWorker, 0}, Want(master, "23456", 2, 1)},
      {"trial_rank_0_is_the_trials_master",
       three,
       {},
       {"7", Role::kWorker, 1},
       Want("mnist-t7-master-0.default.svc", "2222", 3, 2)},
      {"nproc_is_the_replicas_gpus",
       gpus,
       {},
       {"", Role::kMaster, 0},
       Want(master, "2222", 2, 0, 4)},
      {"nproc_of_a_worker", gpus, {}, {"", Role::kWorker, 0}, Want(master, "2222", 2, 1, 2)},
      {"no_master_worker_0_is_rank_0",
       three,
       workers_only,
       {"", Role::kWorker, 0},
       Want("mnist-worker-0.default.svc", "2222", 3, 0)},
      {"no_master_worker_2_is_rank_2",
       three,
       workers_only,
       {"", Role::kWorker, 2},
       Want("mnist-worker-0.default.svc", "2222", 3, 2)},
      {"no_master_ps_gets_nothing", three, workers_only, {"", Role::kParameterServer, 0}, {}},
  };
}

TEST(PyTorchEnvTest, Table) {
  for (const Case& c : Cases()) {
    const std::vector<api::ReplicaGroup> groups =
        c.groups.empty() ? api::ReplicaGroups(c.job.spec().training_input()) : c.groups;
    EXPECT_EQ(BuildPyTorchEnv(c.job, groups, c.task, KubernetesAddresses("default")), c.want)
        << c.name;
  }
}

// The local backend's addresses: rank 0's own port on 127.0.0.1.
TEST(PyTorchEnvTest, LoopbackAddressesGiveTheMastersPort) {
  const v1::TrainingJob job = MasterWorkersJob(2);
  const std::map<std::string, int> ports = {
      {"mnist-master-0", 41001}, {"mnist-worker-0", 41002}, {"mnist-worker-1", 41003}};
  AddressFn address =
      LoopbackAddresses([&](std::string_view name) { return ports.at(std::string(name)); });
  const auto groups = api::ReplicaGroups(job.spec().training_input());
  EXPECT_EQ(BuildPyTorchEnv(job, groups, {"", Role::kWorker, 1}, address),
            Want("127.0.0.1", "41001", 3, 2));
  EXPECT_EQ(BuildPyTorchEnv(job, groups, {"", Role::kMaster, 0}, address),
            Want("127.0.0.1", "41001", 3, 0));
}

// ---- What `kubetrain render` (and the operator) put in each pod ------------

constexpr const char* kPyTorchNames[] = {
    "MASTER_ADDR",     "MASTER_PORT",     "WORLD_SIZE", "RANK",          "LOCAL_RANK",
    "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE"};

// Pod name -> its training container's environment.
std::map<std::string, std::map<std::string, std::string>> RenderedEnv(const v1::TrainingJob& job) {
  std::map<std::string, std::map<std::string, std::string>> pods;
  absl::StatusOr<std::vector<nlohmann::json>> objects = RenderJob(job, "ml", 1, {});
  EXPECT_TRUE(objects.ok()) << objects.status();
  if (!objects.ok()) return pods;
  for (const nlohmann::json& object : *objects) {
    if (object["kind"] != "Pod") continue;
    auto& env = pods[object["metadata"]["name"].get<std::string>()];
    for (const nlohmann::json& e : object["spec"]["containers"][0]["env"]) {
      if (e.contains("value")) env[e["name"].get<std::string>()] = e["value"].get<std::string>();
    }
  }
  return pods;
}

// Every role of a job with the given framework: master, 2 workers, an
// evaluator and (except for PYTORCH, which has none) a parameter server.
v1::TrainingJob EveryRole(v1::TrainingInput::Framework framework) {
  const bool pytorch = framework == v1::TrainingInput::PYTORCH;
  v1::TrainingJob job = MasterWorkersJob(2, pytorch ? 0 : 1, 1);
  v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
  input->set_framework(framework);
  for (v1::ReplicaConfig* config : {input->mutable_master_config(), input->mutable_worker_config(),
                                    input->mutable_evaluator_config()}) {
    config->add_container_command("python3");
    config->add_container_command("train.py");
  }
  return job;
}

TEST(RenderedEnvTest, EveryRoleOfEachFramework) {
  struct Row {
    v1::TrainingInput::Framework framework;
    bool tf_config;
    bool pytorch;
  };
  for (const Row& row :
       {Row{v1::TrainingInput::FRAMEWORK_UNSPECIFIED, true, true},
        Row{v1::TrainingInput::ANY, true, true}, Row{v1::TrainingInput::TENSORFLOW, true, false},
        Row{v1::TrainingInput::PYTORCH, false, true}}) {
    const auto pods = RenderedEnv(EveryRole(row.framework));
    const std::string label = v1::TrainingInput::Framework_Name(row.framework);
    std::vector<std::string> names;
    for (const auto& [name, env] : pods) names.push_back(name);
    const std::vector<std::string> want_names =
        row.framework == v1::TrainingInput::PYTORCH
            ? std::vector<std::string>{"mnist-evaluator-0", "mnist-master-0", "mnist-worker-0",
                                       "mnist-worker-1"}
            : std::vector<std::string>{"mnist-evaluator-0", "mnist-master-0", "mnist-ps-0",
                                       "mnist-worker-0", "mnist-worker-1"};
    EXPECT_EQ(names, want_names) << label;
    const std::map<std::string, std::string> ranks = {
        {"mnist-master-0", "0"}, {"mnist-worker-0", "1"}, {"mnist-worker-1", "2"}};
    for (const auto& [name, env] : pods) {
      EXPECT_EQ(env.count("TF_CONFIG"), row.tf_config ? 1u : 0u) << label << " " << name;
      EXPECT_EQ(env.at("KUBETRAIN_JOB_NAME"), "mnist") << label << " " << name;
      auto rank = ranks.find(name);
      if (!row.pytorch || rank == ranks.end()) {
        // Parameter servers and evaluators are no ranks; TENSORFLOW jobs
        // get none of the set.
        for (const char* var : kPyTorchNames) {
          EXPECT_EQ(env.count(var), 0u) << label << " " << name << " has " << var;
        }
        continue;
      }
      EXPECT_EQ(env.at("MASTER_ADDR"), "mnist-master-0.ml.svc") << label << " " << name;
      EXPECT_EQ(env.at("MASTER_PORT"), "2222") << label << " " << name;
      EXPECT_EQ(env.at("WORLD_SIZE"), "3") << label << " " << name;
      EXPECT_EQ(env.at("RANK"), rank->second) << label << " " << name;
      EXPECT_EQ(env.at("PET_NODE_RANK"), rank->second) << label << " " << name;
      EXPECT_EQ(env.at("PET_NNODES"), "3") << label << " " << name;
      EXPECT_EQ(env.at("LOCAL_RANK"), "0") << label << " " << name;
      EXPECT_EQ(env.at("PET_MASTER_ADDR"), "mnist-master-0.ml.svc") << label << " " << name;
      EXPECT_EQ(env.at("PET_MASTER_PORT"), "2222") << label << " " << name;
      EXPECT_EQ(env.at("PET_NPROC_PER_NODE"), "1") << label << " " << name;
    }
  }
}

// TF_CONFIG stays the first variable (trainers and older tests read it
// there); the PyTorch set follows it.
TEST(RenderedEnvTest, TfConfigFirstThenThePyTorchSet) {
  const v1::TrainingJob job = EveryRole(v1::TrainingInput::ANY);
  const std::vector<DesiredReplica> replicas = DesiredReplicas(job, "", {}, {});
  ASSERT_FALSE(replicas.empty());
  const DesiredReplica& master = replicas[0];
  ASSERT_GE(master.env.size(), 11u);
  EXPECT_EQ(master.env[0].first, "TF_CONFIG");
  for (size_t i = 0; i < std::size(kPyTorchNames); ++i) {
    EXPECT_EQ(master.env[i + 1].first, kPyTorchNames[i]);
  }
  EXPECT_EQ(master.env[11].first, "CLOUD_ML_JOB_ID");
}

// An elastic group: torchrun's settings only, the same on every node but
// is_host, which only the master (the c10d store's host) has true.
TEST(PyTorchEnvTest, ElasticNodesGetTorchrunsRendezvousAndNoRanks) {
  v1::TrainingJob job = MasterWorkersJob(2);
  job.mutable_spec()->mutable_training_input()->set_framework(v1::TrainingInput::PYTORCH);
  v1::ElasticPolicy* elastic = job.mutable_spec()->mutable_elastic_policy();
  elastic->set_min_replicas(2);
  elastic->set_max_replicas(4);
  const auto groups = api::ReplicaGroups(job.spec().training_input());
  const AddressFn address = KubernetesAddresses("ml");
  auto want = [](const std::string& id, const std::string& conf) {
    return EnvList{{"PET_NNODES", "2:4"},
                   {"PET_RDZV_BACKEND", "c10d"},
                   {"PET_RDZV_ENDPOINT", "mnist-master-0.ml.svc:2222"},
                   {"PET_RDZV_ID", id},
                   {"PET_NPROC_PER_NODE", "1"},
                   {"PET_RDZV_CONF", conf}};
  };
  EXPECT_EQ(BuildPyTorchEnv(job, groups, {"", Role::kMaster, 0}, address),
            want("mnist", "is_host=true"));
  EXPECT_EQ(BuildPyTorchEnv(job, groups, {"", Role::kWorker, 1}, address),
            want("mnist", "is_host=false"));
  // A trial's nodes rendezvous at the trial's master, under the trial's id.
  EnvList trial = want("mnist-t3", "is_host=false");
  trial[2].second = "mnist-t3-master-0.ml.svc:2222";
  EXPECT_EQ(BuildPyTorchEnv(job, groups, {"3", Role::kWorker, 0}, address), trial);
  // Not ranks, as before.
  EXPECT_EQ(BuildPyTorchEnv(MasterWorkersJob(2, 1, 1), groups, {"", Role::kEvaluator, 0}, address),
            EnvList{});

  // Everything given: an etcd at a host of its own (no is_host: that is
  // c10d's), the user's conf, the restarts; min and max default to the
  // job's nodes.
  elastic->Clear();
  elastic->set_rdzv_backend("etcd");
  elastic->set_rdzv_host("etcd.ml.svc");
  elastic->set_rdzv_port(2379);
  elastic->set_rdzv_id("run-7");
  elastic->set_max_restarts(100);
  auto* conf = elastic->add_rdzv_conf();
  conf->set_key("join_timeout");
  conf->set_value("900");
  conf = elastic->add_rdzv_conf();
  conf->set_key("last_call_timeout");
  conf->set_value("5");
  EXPECT_EQ(BuildPyTorchEnv(job, groups, {"", Role::kMaster, 0}, address),
            (EnvList{{"PET_NNODES", "3:3"},
                     {"PET_RDZV_BACKEND", "etcd"},
                     {"PET_RDZV_ENDPOINT", "etcd.ml.svc:2379"},
                     {"PET_RDZV_ID", "run-7"},
                     {"PET_NPROC_PER_NODE", "1"},
                     {"PET_RDZV_CONF", "join_timeout=900,last_call_timeout=5"},
                     {"PET_MAX_RESTARTS", "100"}}));

  // Locally: the master's drawn port on 127.0.0.1, which every node
  // matches, so is_host is what tells them apart.
  elastic->Clear();
  elastic->set_min_replicas(2);
  const std::map<std::string, int> ports = {
      {"mnist-master-0", 41001}, {"mnist-worker-0", 41002}, {"mnist-worker-1", 41003}};
  AddressFn loopback =
      LoopbackAddresses([&](std::string_view name) { return ports.at(std::string(name)); });
  EXPECT_EQ(BuildPyTorchEnv(job, groups, {"", Role::kWorker, 0}, loopback),
            (EnvList{{"PET_NNODES", "2:3"},
                     {"PET_RDZV_BACKEND", "c10d"},
                     {"PET_RDZV_ENDPOINT", "127.0.0.1:41001"},
                     {"PET_RDZV_ID", "mnist"},
                     {"PET_NPROC_PER_NODE", "1"},
                     {"PET_RDZV_CONF", "is_host=false"}}));
}

TEST(PyTorchEnvTest, FrameworkChoosesTheSets) {
  struct Row {
    v1::TrainingInput::Framework framework;
    bool tf_config;
    bool pytorch;
  };
  for (const Row& row :
       {Row{v1::TrainingInput::FRAMEWORK_UNSPECIFIED, true, true},
        Row{v1::TrainingInput::ANY, true, true}, Row{v1::TrainingInput::TENSORFLOW, true, false},
        Row{v1::TrainingInput::PYTORCH, false, true}}) {
    v1::TrainingInput input;
    input.set_framework(row.framework);
    EXPECT_EQ(WantsTfConfig(input), row.tf_config) << row.framework;
    EXPECT_EQ(WantsPyTorchEnv(input), row.pytorch) << row.framework;
  }
}

}  // namespace
}  // namespace kubetrain::core
