#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kubetrain/v1/graph.pb.h"
#include "trainer-runtime/data/batch_iterator.h"
#include "trainer-runtime/data/dataset.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/model.h"
#include "trainer-runtime/engine/optimizer.h"
#include "trainer-runtime/engine/variable_store.h"

namespace kubetrain::runtime::engine {

// The training job's settings: Cloud ML trainer flags (see trainer_flags.h
// for the flag names) plus model flags.
struct TrainerOptions {
  std::string train_data_paths;
  std::string eval_data_paths;  // empty: final metrics on the training data
  std::string output_path;      // empty: no checkpoints, summaries or export
  int64_t batch_size = 128;
  double learning_rate = 0.001;
  std::string optimizer = "adam";
  int64_t max_steps = 0;         // 0: from num_epochs
  double num_epochs = 0;         // 0 and no max_steps: one epoch
  double eval_every_secs = 60;   // 0: only at the end; ignored with a step schedule
  int64_t eval_every_steps = 0;  // > 0: every this many global steps instead of by time
  double eval_every_epochs = 0;  // > 0: every this many epochs (of this task's shard) instead
  int64_t log_every_steps = 100;
  double save_checkpoints_secs = 60;
  int64_t save_checkpoints_steps = 0;  // > 0: by steps instead of seconds
  int keep_checkpoints = 5;
  uint64_t seed = 0;
  // Compute threads; 0: the container's CPU budget (cpu_budget.h).
  int threads = 0;
  // Where the graph runs: "cpu", "gpu" (a CUDA device; a usage error when
  // there is none) or "auto" (the GPU when one is visible and the build has
  // CUDA, else the CPU). See TrainerEnvironment::make_device.
  std::string device = "auto";
  // The CPU device's kernels (--cpu_kernels=onednn|blas): oneDNN's where the
  // build has them, else OpenBLAS's. Results, checkpoints and exports do
  // not depend on it.
  CpuKernels cpu_kernels = DefaultCpuKernels();
  std::string model = "mlp";  // mlp, cnn, or a model YAML file
  int64_t hidden1 = 256;
  int64_t hidden2 = 128;
  int64_t eval_batch_size = 1000;
  // Identity of this task in the cluster (TF_CONFIG), for log lines.
  std::string task_type = "master";
  int task_index = 0;
  // Whose checkpoints this run writes and may restore (checkpoint.h): job
  // uid and name and trial id, which kubetrain-runtime takes from
  // KUBETRAIN_JOB_UID, CLOUD_ML_JOB_ID and CLOUD_ML_TRIAL_ID; empty for a
  // run by hand. The model fingerprint is computed by the trainer.
  v1::CheckpointOwner owner;
};

// Receives evaluation results: after each evaluation the loop reports
// "loss", "accuracy" and "training/hptuning/metric" (= the eval accuracy,
// Cloud ML's default hyperparameter metric tag) with the global step;
// `final` is true for the evaluation after the last step (training is over).
// The operator's gRPC reporter and the cloudml-hypertune file writer
// implement it. A failed report is logged, never fatal. Called from the
// training thread only, and only on the chief (the only task that
// evaluates).
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual absl::Status Report(int64_t step, const std::map<std::string, double>& metrics,
                              bool final) = 0;
};

// A batch's loss and accuracy, and the gradient of every variable computed
// at the current variable values. Gradient tensors alias the executor's
// buffers: valid until the next graph run. They are in the memory of the
// context's device (host memory on the CPU device; read them through
// Device::ToHost / CopyToHost elsewhere).
struct GradientResult {
  float loss = 0;
  float accuracy = 0;
  std::vector<NamedGradient> gradients;
};

// Told during ComputeGradients of each variable's gradient as soon as the
// backward pass has computed it, so a strategy can start sending the last
// layers' gradients while the first layers' are still being computed.
// Called on the thread calling ComputeGradients, in the order the executor
// computes the gradients (the same for every step of a model: roughly the
// reverse of the forward order, the output layer first), once per variable.
// `variable` indexes model.variable_names; `gradient` is the tensor
// ComputeGradients will return for it (see FetchObserver: nothing writes it
// again during the run, it lives until the next graph run, it is in the
// device's memory).
class GradientObserver {
 public:
  virtual ~GradientObserver() = default;
  virtual void GradientReady(size_t variable, const Tensor& gradient) = 0;
};

// What a strategy works with; all owned by the trainer and valid for the
// whole run. `variables` holds its values in `device`'s memory (its
// device() is `device`, or null with a CPU device); every transfer between
// host memory (batches, checkpoints, metrics) and the device goes through
// `device`.
class TrainingContext {
 public:
  TrainingContext(const TrainerOptions& options, Model& model, Device& device,
                  VariableStore& variables, Optimizer& optimizer);

  // Forward and backward on `batch` at the variables' current values; no
  // update. `step` seeds dropout, so a step is reproducible. `observer`
  // (optional, not owned) hears of each gradient as soon as it is computed.
  absl::StatusOr<GradientResult> ComputeGradients(const data::Batch& batch, int64_t step,
                                                  GradientObserver* observer = nullptr);
  // Loss and accuracy on `batch` (inference mode: no dropout).
  absl::StatusOr<std::pair<float, float>> Evaluate(const data::Batch& batch);
  // The local variables and optimizer state, for a checkpoint (copied to
  // host memory through the device; an error is the device's).
  absl::Status SnapshotLocal(int64_t global_step, v1::Checkpoint* checkpoint) const;
  // Loads variables (and optimizer state, when the checkpoint has it).
  absl::Status RestoreLocal(const v1::Checkpoint& checkpoint);

  const TrainerOptions& options;
  Model& model;
  Device& device;
  VariableStore& variables;
  Optimizer& optimizer;

 private:
  absl::Status FeedBatch(const data::Batch& batch);
  Executor executor_;
  std::vector<Output> train_fetches_;
  Tensor labels_;  // host memory
  // On a device whose memory is not host memory: the batch's copies there,
  // kept across steps (reshaped in place while they are large enough).
  Tensor device_features_;
  Tensor device_labels_;
  std::vector<engine::Feed> feeds_;
  std::vector<Tensor> results_;
};

// How a step updates the variables. The loop is the same for every mode;
// the strategy decides where variables live and how gradients become
// updates: locally (LocalStrategy), through parameter servers, or averaged
// by all-reduce across replicas (trainer-runtime/dist/).
class TrainingStrategy {
 public:
  virtual ~TrainingStrategy() = default;

  // Before the first step: make ctx.variables hold the starting values:
  // from `restored` (the latest checkpoint, or null for a fresh run) or
  // freshly initialised from options.seed. Returns the global step to start
  // from.
  virtual absl::StatusOr<int64_t> Initialize(TrainingContext& ctx,
                                             const v1::Checkpoint* restored) = 0;

  // One training step on `batch`: compute gradients, get them applied, and
  // return the batch's loss/accuracy and the new global step.
  struct StepResult {
    int64_t global_step = 0;
    float loss = 0;
    float accuracy = 0;
  };
  virtual absl::StatusOr<StepResult> Step(TrainingContext& ctx, const data::Batch& batch,
                                          int64_t global_step) = 0;

  // Brings ctx.variables up to date (e.g. pulls from parameter servers)
  // before an evaluation, checkpoint or export.
  virtual absl::Status SyncVariables(TrainingContext& ctx) { return absl::OkStatus(); }
  // Fills a checkpoint of the current state.
  virtual absl::Status Snapshot(TrainingContext& ctx, int64_t global_step,
                                v1::Checkpoint* checkpoint) {
    return ctx.SnapshotLocal(global_step, checkpoint);
  }
  // Whether this task writes checkpoints, summaries and the export, and
  // runs evaluations (the chief).
  virtual bool IsChief() const { return true; }
  // This task's shard of the training data.
  virtual int shard_index() const { return 0; }
  virtual int shard_count() const { return 1; }
  // After the last step (e.g. tell the cluster this worker is done).
  virtual absl::Status Finish(TrainingContext& ctx) { return absl::OkStatus(); }
  // Whether the strategy reaches variables and gradients only through the
  // device (kernels, Device transfers), so it works on any device. A
  // strategy that reads tensor data() directly (host memory) keeps the
  // default: the trainer then runs it on the CPU (--device=auto) or refuses
  // the GPU (--device=gpu, a usage error).
  virtual bool RunsOnAnyDevice() const { return false; }
};

// Single process: gradients and updates on the local device.
class LocalStrategy final : public TrainingStrategy {
 public:
  absl::StatusOr<int64_t> Initialize(TrainingContext& ctx, const v1::Checkpoint* restored) override;
  absl::StatusOr<StepResult> Step(TrainingContext& ctx, const data::Batch& batch,
                                  int64_t global_step) override;
  bool RunsOnAnyDevice() const override { return true; }
};

// Makes the device a run trains on, from options.device and
// options.threads. Errors carry their exit code (exit_codes.h): a placement
// that cannot be had ("gpu" without a GPU) is a usage error (2) naming
// --device.
using DeviceFactory =
    std::function<absl::StatusOr<std::unique_ptr<Device>>(const TrainerOptions& options)>;

// The engine's own factory, for builds without CUDA: "cpu" and "auto" give a
// CpuDevice with options.threads and options.cpu_kernels; "gpu" is a usage error (no CUDA device in
// this build); another value InvalidArgument (usage) naming --device. The
// kubetrain-runtime binary passes a factory that adds the CUDA device when
// it is built with CUDA (trainer-runtime/cmd/device_factory.h).
absl::StatusOr<std::unique_ptr<Device>> CreateCpuOnlyDevice(const TrainerOptions& options);

// The factory Train uses when TrainerEnvironment::make_device is null:
// CreateCpuOnlyDevice unless a binary installed another (kubetrain-runtime
// installs its CUDA-aware one in main). Set it before any training starts:
// not synchronised with running trainers.
void SetDefaultDeviceFactory(DeviceFactory factory);
const DeviceFactory& DefaultDeviceFactory();

// Usage error (exit code 2) naming --device unless `placement` is cpu, gpu
// or auto.
absl::Status CheckDevicePlacement(absl::string_view placement);

// What the outside world provides; every field has a working default.
struct TrainerEnvironment {
  std::ostream* log = nullptr;                 // null: std::cout
  std::function<double()> now;                 // wall clock in seconds; null: the system clock
  std::vector<MetricsSink*> metrics_sinks;     // not owned
  std::unique_ptr<TrainingStrategy> strategy;  // null: LocalStrategy
  // Called after each step with the new global step; an error stops the run
  // with that error (fault injection in tests, cancellation).
  std::function<absl::Status(int64_t)> after_step;
  // Whether someone asked the run to stop early (a pod being deleted); null:
  // never. Polled on the training thread after each step and before the
  // first, so it must be cheap. OK: go on. An error stops the run after the
  // step in progress: the chief brings the variables up to date and writes a
  // checkpoint at the current step (when there is an output folder), the
  // loop logs `Stopped at step N on <the error's message>: ...` and returns
  // the error (code and payloads, so its exit code, kept) with the step in
  // its message. No final evaluation, export, final metrics report or
  // TrainingStrategy::Finish: the run is not over, and a run on the same
  // output folder resumes from step N. A checkpoint that cannot be written
  // is a warning in the log, not the error returned.
  std::function<absl::Status()> pending_stop;
  DeviceFactory make_device;  // null: DefaultDeviceFactory()
};

// final_loss and final_accuracy are the chief's last evaluation; 0 on other
// tasks, which do not evaluate.
struct TrainResult {
  int64_t global_step = 0;
  double final_loss = 0;
  double final_accuracy = 0;
};

// Parses the --model flag: "mlp" (with hidden1/hidden2), "cnn", or a path to
// a model YAML file.
absl::StatusOr<ModelSpec> ResolveModelSpec(const TrainerOptions& options);

// Runs training to completion (see trainer.cc for the loop), or to an early
// stop (TrainerEnvironment::pending_stop). Errors carry their exit code
// (exit_codes.h): bad data or model 3, NaN loss 4, lost peers 138, a stop
// the one its request carries.
absl::StatusOr<TrainResult> Train(const TrainerOptions& options, TrainerEnvironment env);

}  // namespace kubetrain::runtime::engine
