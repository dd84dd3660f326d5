#include "trainer-runtime/dist/strategy/task_runner.h"

#include <cstdlib>
#include <iostream>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

// "0.0.0.0:<port>": the TF_CONFIG host may be a service name that only
// resolves to this pod from outside.
std::string BindAddress(const std::string& address) {
  return absl::StrCat("0.0.0.0:", address.substr(address.rfind(':') + 1));
}

absl::StatusOr<std::unique_ptr<GrpcTransport>> ConnectGrpc(
    const std::vector<std::string>& addresses, int rank, const std::string& group,
    absl::Time deadline) {
  GrpcTransport::Options options;
  options.group = group;
  ASSIGN_OR_RETURN(auto transport, GrpcTransport::Listen(rank, static_cast<int>(addresses.size()),
                                                         BindAddress(addresses[rank]), options));
  RETURN_IF_ERROR(transport->Connect(addresses, deadline));
  return transport;
}

absl::StatusOr<std::unique_ptr<runtime::engine::TrainingStrategy>> MakeAllReduce(
    const ClusterSpec& cluster, const DistributedFlags& flags) {
  const absl::Time deadline = absl::Now() + flags.connect_timeout;
  const std::vector<std::string> addresses = cluster.ReplicaAddresses();
  const int rank = *cluster.ReplicaRank();
  ASSIGN_OR_RETURN(std::unique_ptr<GrpcTransport> grpc,
                   ConnectGrpc(addresses, rank, "kubetrain-allreduce", deadline));
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

absl::StatusOr<DistributedFlags> ExtractDistributedFlags(std::vector<std::string>& args) {
  DistributedFlags flags;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      rest.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    std::replace(name.begin(), name.end(), '-', '_');
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= args.size())
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      return args[++i];
    };
    // A bare --name means true; a value must be a boolean.
    auto take_bool = [&](bool& out) -> absl::Status {
      if (!has_value) {
        out = true;
      } else if (!absl::SimpleAtob(value, &out)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": want true or false, got '", value, "'"));
      }
      return absl::OkStatus();
    };
    if (name == "strategy") {
      ASSIGN_OR_RETURN(flags.strategy, take_value());
      if (flags.strategy != "auto" && flags.strategy != "local" && flags.strategy != "allreduce" &&
          flags.strategy != "ps") {
        return absl::InvalidArgumentError(absl::StrCat(
            "--strategy: want auto, local, allreduce or ps, got '", flags.strategy, "'"));
      }
    } else if (name == "transport") {
      ASSIGN_OR_RETURN(flags.transport, take_value());
      if (flags.transport != "auto" && flags.transport != "grpc" && flags.transport != "shm") {
        return absl::InvalidArgumentError(
            absl::StrCat("--transport: want auto, grpc or shm, got '", flags.transport, "'"));
      }
    } else if (name == "sync_replicas") {
      RETURN_IF_ERROR(take_bool(flags.sync_replicas));
    } else if (name == "allreduce_overlap") {
      RETURN_IF_ERROR(take_bool(flags.allreduce_overlap));
    } else if (name == "allreduce_bucket_kib") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      int64_t kib = 0;
      if (!absl::SimpleAtoi(v, &kib) || kib <= 0 || kib > (int64_t{1} << 30)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--allreduce_bucket_kib: want a positive number of KiB, got '", v, "'"));
      }
      flags.allreduce_bucket_bytes = static_cast<size_t>(kib) << 10;
    } else if (name == "connect_timeout_secs") {
      ASSIGN_OR_RETURN(std::string v, take_value());
      double secs = 0;
      if (!absl::SimpleAtod(v, &secs) || !(secs > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--connect_timeout_secs: want a positive number, got '", v, "'"));
      }
      flags.connect_timeout = absl::Seconds(secs);
    } else {
      rest.push_back(arg);
    }
  }
  args = std::move(rest);
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

int TrainMain(const std::vector<std::string>& args_in) {
  std::vector<std::string> args = args_in;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << "usage: kubetrain-runtime train [flags]\n\nflags:\n"
                << runtime::engine::TrainerFlagsHelp()
                << "  --strategy auto|local|allreduce|ps\n  --sync_replicas\n"
                   "  --transport auto|grpc|shm\n  --connect_timeout_secs N\n"
                   "  --allreduce_overlap[=true|false]\n  --allreduce_bucket_kib N\n";
      return runtime::kExitOk;
    }
  }
  auto fail = [](const absl::Status& status) {
    int code = runtime::ExitCodeFor(status);
    std::cerr << "ERROR: " << status.message() << " (exit code " << code
              << (runtime::IsRetryableExitCode(code) ? ", retryable" : "") << ")" << std::endl;
    return code;
  };
  absl::StatusOr<DistributedFlags> flags = ExtractDistributedFlags(args);
  if (!flags.ok()) return fail(runtime::WithExitCode(flags.status(), runtime::kExitUsage));
  absl::StatusOr<TrainerOptions> options = runtime::engine::ParseTrainerFlags(args);
  if (!options.ok()) return fail(options.status());
  options->owner = runtime::engine::CheckpointOwnerFromEnvironment();
  const char* tf_config = std::getenv("TF_CONFIG");
  absl::StatusOr<ClusterSpec> cluster = ClusterSpec::FromTfConfig(tf_config ? tf_config : "");
  if (!cluster.ok()) return fail(runtime::WithExitCode(cluster.status(), runtime::kExitUsage));
  absl::StatusOr<TrainResult> result = RunTask(*cluster, *flags, *options, {});
  if (!result.ok()) return fail(result.status());
  return runtime::kExitOk;
}

}  // namespace kubetrain::dist
