#include "trainer-runtime/dist/strategy/task_runner.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/flags/flags.h"
#include "common/status_macros.h"
#include "trainer-runtime/dist/collectives.h"
#include "trainer-runtime/dist/grpc/grpc_transport.h"
#include "trainer-runtime/dist/shm/shm_transport.h"
#include "trainer-runtime/dist/strategy/all_reduce_strategy.h"
#include "trainer-runtime/dist/strategy/evaluator.h"
#include "trainer-runtime/dist/strategy/parameter_server.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/engine/trainer_flags.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::dist {
namespace {

using runtime::engine::TrainerEnvironment;
using runtime::engine::TrainerOptions;
using runtime::engine::TrainResult;

absl::Status Retryable(absl::Status status) {
  const bool transient = status.code() == absl::StatusCode::kUnavailable ||
                         status.code() == absl::StatusCode::kDeadlineExceeded;
  return runtime::WithExitCode(status,
                               transient ? runtime::kExitRetryable : runtime::kExitInternal);
}

std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host == "localhost" || host == "127.0.0.1" || host == "[::1]") return "localhost";
  return host;
}

absl::StatusOr<std::unique_ptr<runtime::engine::TrainingStrategy>> MakeAllReduce(
    const ClusterSpec& cluster, const DistributedFlags& flags) {
  const absl::Time deadline = absl::Now() + flags.connect_timeout;
  const std::vector<std::string> addresses = cluster.ReplicaAddresses();
  const int rank = *cluster.ReplicaRank();
  GrpcTransport::Options grpc_options;
  grpc_options.group = "kubetrain-allreduce";
  ASSIGN_OR_RETURN(std::unique_ptr<GrpcTransport> grpc,
                   GrpcTransport::Join(addresses, rank, grpc_options, deadline));
  bool same_host = true;
  for (const auto& a : addresses) same_host &= HostOf(a) == HostOf(addresses[0]);
  const bool use_shm = flags.transport == "shm" || (flags.transport == "auto" && same_host);
  AllReduceStrategy::Options options;
  options.overlap = flags.allreduce_overlap;
  options.bucket_bytes = flags.allreduce_bucket_bytes;
  for (const TaskId& t : cluster.Replicas()) {
    options.replica_names.push_back(
        absl::StrCat(cluster.TaskName(t), " (", cluster.Address(t).value_or("?"), ")"));
  }
  if (!use_shm) return std::make_unique<AllReduceStrategy>(std::move(grpc), options);
  // The segment's name must be new for every run: the chief draws it and
  // sends it over gRPC.
  uint64_t nonce[2] = {0, 0};
  if (rank == 0) {
    std::random_device rd;
    nonce[0] = (uint64_t{rd()} << 32) | rd();
    nonce[1] = static_cast<uint64_t>(getpid());
  }
  RETURN_IF_ERROR(
      Broadcast(*grpc, 0, absl::Span<std::byte>(reinterpret_cast<std::byte*>(nonce), sizeof(nonce)),
                /*op=*/0, deadline));
  const std::string name = absl::StrCat("kubetrain-", nonce[0], "-", nonce[1]);
  ASSIGN_OR_RETURN(std::unique_ptr<ShmTransport> shm,
                   ShmTransport::Connect(name, rank, static_cast<int>(addresses.size()), deadline));
  std::shared_ptr<GrpcTransport> keep(std::move(grpc));
  return std::make_unique<AllReduceStrategy>(std::move(shm), options, keep);
}

}  // namespace

void AddDistributedFlags(CLI::App& app, DistributedFlags* flags) {
  // One option per spelling ('-' or '_'), each hidden but the first.
  auto add = [&](const std::string& name, const char* type, const std::string& help,
                 const std::string& shown_default, bool is_flag,
                 std::function<void(const std::string& name, const std::string& value)> set) {
    std::vector<std::string> spellings = {"--" + name};
    std::string dashed = "--" + name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    if (dashed != spellings[0]) spellings.push_back(dashed);
    for (const std::string& spelled : spellings) {
      CLI::Option* option = app.add_option_function<std::string>(
          spelled, [name, set](const std::string& value) { set("--" + name, value); }, help);
      option->type_name(type)->trigger_on_parse();
      // A bare --name means true; a value must be joined: --name=false.
      if (is_flag) option->expected(0);
      if (!shown_default.empty()) option->default_str(shown_default);
      if (spelled != spellings[0]) option->group(flags::kUnlistedGroup);
    }
  };
  auto boolean = [](bool* out) {
    return [out](const std::string& name, const std::string& value) {
      if (!absl::SimpleAtob(value, out)) {
        flags::Reject(absl::StrCat(name, ": want true or false, got '", value, "'"));
      }
    };
  };
  add("strategy", "auto|local|allreduce|ps",
      "auto: ps when the cluster has ps tasks, allreduce when it has\n"
      "more than one replica, else local",
      flags->strategy, false, [flags](const std::string&, const std::string& value) {
        if (value != "auto" && value != "local" && value != "allreduce" && value != "ps") {
          flags::Reject(
              absl::StrCat("--strategy: want auto, local, allreduce or ps, got '", value, "'"));
        }
        flags->strategy = value;
      });
  add("sync_replicas", "[=true|false]",
      "ps: one gradient per worker per step (SyncReplicasOptimizer);\n"
      "without it, asynchronous",
      flags->sync_replicas ? "true" : "false", true, boolean(&flags->sync_replicas));
  add("allreduce_overlap", "[=true|false]",
      "all-reduce gradient buckets while the backward pass goes on;\n"
      "false waits for the whole backward pass (same results, bit for bit)",
      flags->allreduce_overlap ? "true" : "false", true, boolean(&flags->allreduce_overlap));
  add("allreduce_bucket_kib", "N", "gradients fused per all-reduce",
      std::to_string(flags->allreduce_bucket_bytes >> 10), false,
      [flags](const std::string&, const std::string& value) {
        int64_t kib = 0;
        if (!absl::SimpleAtoi(value, &kib) || kib <= 0 || kib > (int64_t{1} << 30)) {
          flags::Reject(absl::StrCat("--allreduce_bucket_kib: want a positive number of KiB, got '",
                                     value, "'"));
        }
        flags->allreduce_bucket_bytes = static_cast<size_t>(kib) << 10;
      });
  add("transport", "auto|grpc|shm", "allreduce: shm when every replica is on this host, else grpc",
      flags->transport, false, [flags](const std::string&, const std::string& value) {
        if (value != "auto" && value != "grpc" && value != "shm") {
          flags::Reject(absl::StrCat("--transport: want auto, grpc or shm, got '", value, "'"));
        }
        flags->transport = value;
      });
  add("connect_timeout_secs", "N", "how long to wait for peers",
      absl::StrCat(absl::ToDoubleSeconds(flags->connect_timeout)), false,
      [flags](const std::string&, const std::string& value) {
        double secs = 0;
        if (!absl::SimpleAtod(value, &secs) || !(secs > 0)) {
          flags::Reject(
              absl::StrCat("--connect_timeout_secs: want a positive number, got '", value, "'"));
        }
        flags->connect_timeout = absl::Seconds(secs);
      });
}

absl::StatusOr<DistributedFlags> ExtractDistributedFlags(std::vector<std::string>& args) {
  DistributedFlags flags;
  CLI::App app;
  flags::Configure(app);
  app.set_help_flag();
  app.allow_extras();
  AddDistributedFlags(app, &flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    flags::ParseProblem problem = flags::Classify(app, error);
    if (problem.kind == flags::ParseProblem::Kind::kMissingValue) {
      std::string name = problem.subject.substr(2);
      std::replace(name.begin(), name.end(), '-', '_');
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    return absl::InvalidArgumentError(problem.subject);
  }
  args = app.remaining();
  return flags;
}

absl::StatusOr<std::string> ChooseStrategy(const ClusterSpec& cluster,
                                           const DistributedFlags& flags) {
  const bool has_ps = cluster.NumTasks(api::Role::kParameterServer) > 0;
  std::string strategy = flags.strategy;
  if (strategy == "auto")
    strategy = has_ps ? "ps" : cluster.NumReplicas() > 1 ? "allreduce" : "local";
  if (strategy == "ps" && !has_ps) {
    return absl::InvalidArgumentError("--strategy=ps but TF_CONFIG lists no ps tasks");
  }
  if (strategy == "local" && (cluster.NumReplicas() > 1 || has_ps)) {
    return absl::InvalidArgumentError("--strategy=local but TF_CONFIG describes a cluster");
  }
  return strategy;
}

absl::StatusOr<TrainResult> RunTask(const ClusterSpec& cluster, const DistributedFlags& flags,
                                    TrainerOptions options, TrainerEnvironment env) {
  ASSIGN_OR_RETURN(std::string strategy, ChooseStrategy(cluster, flags));
  const TaskId task = cluster.task();
  options.task_type = task.role == api::Role::kMaster ? cluster.master_name()
                                                      : std::string(api::RoleName(task.role));
  options.task_index = task.index;
  // Only the chief reports metrics (to the operator, the hypertune file).
  if (!cluster.IsChief()) env.metrics_sinks.clear();
  if (task.role == api::Role::kEvaluator) {
    RETURN_IF_ERROR(RunEvaluator(options, env.log != nullptr ? *env.log : std::cout));
    return TrainResult{};
  }
  // A job whose latest checkpoint is at --max_steps or past it has nothing
  // left to train. Its chief evaluates and exports alone, as the local
  // strategy does, instead of waiting for peers that finished and left (a
  // chief restarted at the end of a job, its checkpoints on shared storage);
  // a worker or ps started again beside it (the operator brings completed
  // peers back for a restarted chief that still needs them) ends at once.
  if (strategy != "local" && options.max_steps > 0 && !options.output_path.empty()) {
    // The model fingerprint is not known before the model is built: Train
    // checks it when it restores.
    absl::StatusOr<runtime::engine::OutputFolder> folder =
        runtime::engine::ResolveOutputFolder(options.output_path, options.owner);
    if (folder.ok() && folder->latest && folder->latest->global_step() >= options.max_steps) {
      std::ostream& log = env.log != nullptr ? *env.log : std::cout;
      log << "The latest checkpoint is at step " << folder->latest->global_step()
          << " (--max_steps=" << options.max_steps << "): training is done; ";
      if (!cluster.IsChief()) {
        log << "nothing left for " << options.task_type << " " << options.task_index << " to do"
            << std::endl;
        TrainResult done;
        done.global_step = folder->latest->global_step();
        return done;
      }
      log << "evaluating and exporting without the other tasks" << std::endl;
      env.strategy.reset();
      return runtime::engine::Train(options, std::move(env));
    }
  }
  if (strategy == "ps") {
    ParameterServerOptions ps;
    ps.sync_replicas = flags.sync_replicas;
    ps.connect_timeout = flags.connect_timeout;
    if (task.role == api::Role::kParameterServer) {
      absl::Status served = ServeParameters(cluster, options, ps);
      if (!served.ok()) return Retryable(served);
      return TrainResult{};
    }
    auto made = MakeParameterServerStrategy(cluster, options, ps);
    if (!made.ok()) return Retryable(made.status());
    env.strategy = std::move(*made);
  } else if (strategy == "allreduce") {
    auto made = MakeAllReduce(cluster, flags);
    if (!made.ok()) return Retryable(made.status());
    env.strategy = std::move(*made);
  }
  return runtime::engine::Train(options, std::move(env));
}

int TrainMain(const std::vector<std::string>& args) {
  auto fail = [](const absl::Status& status) {
    int code = runtime::ExitCodeFor(status);
    std::cerr << "ERROR: " << status.message() << " (exit code " << code
              << (runtime::IsRetryableExitCode(code) ? ", retryable" : "") << ")" << std::endl;
    return code;
  };
  // One parse of the arguments, with the trainer's flags and these.
  TrainerOptions options;
  DistributedFlags flags;
  CLI::App app(
      "usage: kubetrain-runtime train [flags]\n\nflags (each also spelled with - for _, as in "
      "--job-dir):");
  flags::Configure(app);
  runtime::engine::AddTrainerFlags(app, &options);
  AddDistributedFlags(app, &flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return runtime::kExitOk;
  } catch (const CLI::ParseError& error) {
    return fail(runtime::engine::TrainerFlagsError(app, error));
  }
  options.owner = runtime::engine::CheckpointOwnerFromEnvironment();
  const char* tf_config = std::getenv("TF_CONFIG");
  absl::StatusOr<ClusterSpec> cluster = ClusterSpec::FromTfConfig(tf_config ? tf_config : "");
  if (!cluster.ok()) return fail(runtime::WithExitCode(cluster.status(), runtime::kExitUsage));
  absl::StatusOr<TrainResult> result = RunTask(*cluster, flags, options, {});
  if (!result.ok()) return fail(result.status());
  return runtime::kExitOk;
}

}  // namespace kubetrain::dist
