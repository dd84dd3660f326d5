#include "trainer-runtime/engine/trainer.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cpu_budget/cpu_budget.h"
#include "google/protobuf/text_format.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/engine/model_yaml.h"
#include "trainer-runtime/exit_codes.h"
#include "trainer-runtime/summary/event_writer.h"

namespace kubetrain::runtime::engine {

namespace fs = std::filesystem;

TrainingContext::TrainingContext(const TrainerOptions& options, Model& model, Device& device,
                                 VariableStore& variables, Optimizer& optimizer)
    : options(options),
      model(model),
      device(device),
      variables(variables),
      optimizer(optimizer),
      executor_(model.graph, device, variables) {
  train_fetches_ = {model.loss, model.accuracy};
  train_fetches_.insert(train_fetches_.end(), model.gradients.begin(), model.gradients.end());
}

namespace {

// `cache` with `shape`, on `device`: reshaped in place when its buffer is
// large enough (a smaller last batch, an eval batch), else reallocated.
Tensor& ReuseOrAllocate(Device& device, Tensor& cache, const Shape& shape) {
  if (cache.valid() && cache.shape() == shape) return cache;
  size_t bytes = static_cast<size_t>(NumElements(shape)) * sizeof(float);
  if (cache.valid() && cache.buffer()->size() >= bytes) {
    cache = Tensor(shape, cache.buffer());
  } else {
    cache = Tensor();  // back to the allocator first: the new block may reuse it
    cache = device.Allocate(shape);
  }
  return cache;
}

}  // namespace

absl::Status TrainingContext::FeedBatch(const data::Batch& batch) {
  Shape shape = {batch.size};
  shape.insert(shape.end(), model.example_shape.begin(), model.example_shape.end());
  if (static_cast<int64_t>(batch.features.size()) != NumElements(shape) ||
      static_cast<int64_t>(batch.labels.size()) != batch.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch.index, " holds ", batch.features.size(), " values for ",
                     batch.size, " examples of shape ", ShapeString(model.example_shape)));
  }
  // On the CPU the executor reads the batch in place; it outlives the run.
  Tensor features = Tensor::WrapHost(shape, const_cast<float*>(batch.features.data()), nullptr);
  if (!labels_.valid() || labels_.num_elements() != batch.size)
    labels_ = Tensor::Host({batch.size});
  float* l = labels_.data();
  for (int64_t i = 0; i < batch.size; ++i) l[i] = static_cast<float>(batch.labels[i]);
  if (device.type() == DeviceType::kCpu) {
    feeds_ = {{model.input, std::move(features)}, {model.labels, labels_}};
    return absl::OkStatus();
  }
  // Elsewhere the batch is copied into device buffers that persist across
  // steps, so a steady loop allocates no device memory for its inputs. The
  // device orders each upload after the kernels still reading the last one.
  Tensor& device_features = ReuseOrAllocate(device, device_features_, shape);
  Tensor& device_labels = ReuseOrAllocate(device, device_labels_, labels_.shape());
  if (absl::Status s = device.CopyFromHost(features, device_features); !s.ok()) return s;
  if (absl::Status s = device.CopyFromHost(labels_, device_labels); !s.ok()) return s;
  feeds_ = {{model.input, device_features}, {model.labels, device_labels}};
  return absl::OkStatus();
}

namespace {

// Fetches 0 and 1 of a training run are the loss and accuracy; fetch 2 + i
// is the gradient of variable i.
class GradientFetchObserver final : public FetchObserver {
 public:
  explicit GradientFetchObserver(GradientObserver& observer) : observer_(observer) {}
  void FetchReady(size_t fetch, const Tensor& value) override {
    if (fetch >= 2) observer_.GradientReady(fetch - 2, value);
  }

 private:
  GradientObserver& observer_;
};

}  // namespace

absl::StatusOr<GradientResult> TrainingContext::ComputeGradients(const data::Batch& batch,
                                                                 int64_t step,
                                                                 GradientObserver* observer) {
  if (absl::Status s = FeedBatch(batch); !s.ok()) return s;
  RunContext run{true, options.seed, step};
  absl::Status ran;
  if (observer == nullptr) {
    ran = executor_.Run(feeds_, train_fetches_, &results_, run);
  } else {
    GradientFetchObserver fetch_observer(*observer);
    ran = executor_.Run(feeds_, train_fetches_, &results_, run, &fetch_observer);
  }
  if (!ran.ok()) return ran;
  GradientResult r;
  absl::StatusOr<float> loss = device.ReadScalar(results_[0]);
  if (!loss.ok()) return loss.status();
  absl::StatusOr<float> accuracy = device.ReadScalar(results_[1]);
  if (!accuracy.ok()) return accuracy.status();
  r.loss = *loss;
  r.accuracy = *accuracy;
  r.gradients.reserve(model.variable_names.size());
  for (size_t i = 0; i < model.variable_names.size(); ++i) {
    r.gradients.push_back({model.variable_names[i], results_[2 + i]});
  }
  return r;
}

absl::StatusOr<std::pair<float, float>> TrainingContext::Evaluate(const data::Batch& batch) {
  if (absl::Status s = FeedBatch(batch); !s.ok()) return s;
  std::vector<Output> fetches = {model.loss, model.accuracy};
  if (absl::Status s =
          executor_.Run(feeds_, fetches, &results_, RunContext{false, options.seed, 0});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<float> loss = device.ReadScalar(results_[0]);
  if (!loss.ok()) return loss.status();
  absl::StatusOr<float> accuracy = device.ReadScalar(results_[1]);
  if (!accuracy.ok()) return accuracy.status();
  return std::make_pair(*loss, *accuracy);
}

absl::Status TrainingContext::SnapshotLocal(int64_t global_step, v1::Checkpoint* checkpoint) const {
  checkpoint->Clear();
  checkpoint->set_global_step(global_step);
  for (const auto& [name, value] : variables.values()) {
    v1::NamedTensor* t = checkpoint->add_variables();
    t->set_name(name);
    if (absl::Status s = TensorToProto(value, device, t->mutable_value()); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("variable '", name, "': ", s.message()));
    }
  }
  return optimizer.SaveState(checkpoint->mutable_optimizer());
}

absl::Status TrainingContext::RestoreLocal(const v1::Checkpoint& checkpoint) {
  for (const v1::NamedTensor& t : checkpoint.variables()) {
    absl::StatusOr<Tensor> value = TensorFromProto(t.value());
    if (!value.ok()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint variable '", t.name(), "': ", value.status().message()));
    }
    if (absl::Status s = variables.Assign(t.name(), *value); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint does not fit the model: ", s.message()));
    }
  }
  for (const std::string& name : model.variable_names) {
    if (variables.Find(name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint at step ", checkpoint.global_step(), " has no variable '", name, "'"));
    }
  }
  if (checkpoint.has_optimizer()) return optimizer.RestoreState(checkpoint.optimizer());
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LocalStrategy::Initialize(TrainingContext& ctx,
                                                  const v1::Checkpoint* restored) {
  if (restored != nullptr) {
    if (absl::Status s = ctx.RestoreLocal(*restored); !s.ok()) return s;
    return restored->global_step();
  }
  if (absl::Status s = InitializeVariables(ctx.model.graph, ctx.options.seed, ctx.variables);
      !s.ok())
    return s;
  return 0;
}

absl::StatusOr<TrainingStrategy::StepResult> LocalStrategy::Step(TrainingContext& ctx,
                                                                 const data::Batch& batch,
                                                                 int64_t global_step) {
  absl::StatusOr<GradientResult> g = ctx.ComputeGradients(batch, global_step);
  if (!g.ok()) return g.status();
  if (absl::Status s = ctx.optimizer.Apply(ctx.variables, g->gradients); !s.ok()) return s;
  return StepResult{global_step + 1, g->loss, g->accuracy};
}

absl::StatusOr<ModelSpec> ResolveModelSpec(const TrainerOptions& options) {
  if (options.model == "mlp") {
    if (options.hidden1 <= 0 || options.hidden2 <= 0) {
      return absl::InvalidArgumentError("--hidden1 and --hidden2 must be positive");
    }
    return MlpSpec(options.hidden1, options.hidden2);
  }
  if (options.model == "cnn") return CnnSpec();
  std::ifstream in(options.model);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--model: '", options.model,
                                            "' is neither mlp, cnn nor a readable model file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseModelYaml(text.str(), options.model);
}

namespace {

double SystemNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// `value` at float precision: the double nearest to the shortest decimal
// that reads back as the same float. What the graph computed in float is
// reported as that number (0.3341, not 0.33410000801086426).
double AtFloatPrecision(double value) {
  if (!std::isfinite(value)) return value;
  char text[64];
  const std::to_chars_result end =
      std::to_chars(text, text + sizeof(text) - 1, static_cast<float>(value));
  *end.ptr = '\0';
  return std::strtod(text, nullptr);
}

// Loss and accuracy over a whole dataset, in eval-sized slices, weighted by
// slice size. The accuracy is the count of examples classified right over
// the count of examples (exactly 0.8804 for 8804 of 10000); the loss, a mean
// of float losses, is given at float precision.
absl::StatusOr<std::pair<double, double>> EvaluateDataset(TrainingContext& ctx,
                                                          const data::Dataset& ds) {
  int64_t bs = std::max<int64_t>(ctx.options.eval_batch_size, 1);
  double loss = 0;
  int64_t correct = 0;
  data::Batch batch;
  const int64_t example_size = ds.example_size();
  for (int64_t start = 0; start < ds.num_examples; start += bs) {
    int64_t n = std::min(bs, ds.num_examples - start);
    batch.size = n;
    batch.features.assign(ds.features.begin() + start * example_size,
                          ds.features.begin() + (start + n) * example_size);
    batch.labels.assign(ds.labels.begin() + start, ds.labels.begin() + start + n);
    absl::StatusOr<std::pair<float, float>> r = ctx.Evaluate(batch);
    if (!r.ok()) return r.status();
    loss += static_cast<double>(r->first) * static_cast<double>(n);
    // The slice's accuracy is its count over n, in float: the count comes
    // back exactly.
    correct += std::llround(static_cast<double>(r->second) * static_cast<double>(n));
  }
  double total = static_cast<double>(std::max<int64_t>(ds.num_examples, 1));
  return std::make_pair(AtFloatPrecision(loss / total), static_cast<double>(correct) / total);
}

absl::Status BadInput(const absl::Status& s, absl::string_view what) {
  return WithExitCode(absl::Status(s.code(), absl::StrCat(what, ": ", s.message())), kExitBadInput);
}

class Loop {
 public:
  Loop(const TrainerOptions& o, TrainerEnvironment env) : o_(o), env_(std::move(env)) {
    // Without --threads, the container's share of the node, not the node
    // (cpu_budget.h).
    const cpu_budget::CpuBudget budget = cpu_budget::ThreadsFor(o_.threads);
    o_.threads = budget.threads;
    threads_source_ = budget.source;
    log_ = env_.log ? env_.log : &std::cout;
    if (!env_.now) env_.now = SystemNow;
    if (!env_.strategy) env_.strategy = std::make_unique<LocalStrategy>();
  }

  absl::StatusOr<TrainResult> Run();

 private:
  void Log(const std::string& line) { *log_ << line << std::endl; }
  absl::Status Evaluate(TrainingContext& ctx, int64_t step, bool final_eval, TrainResult* result);
  absl::Status Checkpoint(TrainingContext& ctx, int64_t step);
  absl::Status Export(TrainingContext& ctx);
  // OK, or the stop env_.pending_stop asks for.
  absl::Status PendingStop() { return env_.pending_stop ? env_.pending_stop() : absl::OkStatus(); }
  // Ends the run at `step` on the stop `why` (TrainerEnvironment::pending_stop).
  absl::Status Stop(TrainingContext& ctx, int64_t step, const absl::Status& why);

  TrainerOptions o_;  // threads resolved
  std::string threads_source_;
  TrainerEnvironment env_;
  // Where this run's checkpoints, summaries and export go: o_.output_path,
  // or its own subfolder of it (ResolveOutputFolder); empty: nowhere.
  std::string output_path_;
  // Stamped on every checkpoint written.
  v1::CheckpointOwner owner_;
  std::ostream* log_;
  std::shared_ptr<const data::Dataset> train_;
  std::shared_ptr<const data::Dataset> eval_;
  std::unique_ptr<summary::EventWriter> train_events_;
  std::unique_ptr<summary::EventWriter> eval_events_;
  int64_t last_checkpoint_step_ = -1;
  // Outlives everything in Run that holds device tensors.
  absl::StatusOr<std::unique_ptr<Device>> device_;
};

absl::Status Loop::Evaluate(TrainingContext& ctx, int64_t step, bool final_eval,
                            TrainResult* result) {
  if (absl::Status s = env_.strategy->SyncVariables(ctx); !s.ok()) return s;
  const data::Dataset& ds = eval_ ? *eval_ : *train_;
  absl::StatusOr<std::pair<double, double>> r = EvaluateDataset(ctx, ds);
  if (!r.ok()) return r.status();
  auto [loss, accuracy] = *r;
  Log(absl::StrFormat("Eval, step %d: loss: %.3f, accuracy: %.3f", step, loss, accuracy));
  if (eval_events_) {
    absl::Status s = eval_events_->WriteScalars(
        {{"loss", static_cast<float>(loss)}, {"accuracy", static_cast<float>(accuracy)}}, step,
        env_.now());
    if (s.ok()) s = eval_events_->Flush();
    if (!s.ok()) Log(absl::StrCat("Warning: eval summaries: ", s.message()));
  }
  std::map<std::string, double> metrics = {
      {"loss", loss}, {"accuracy", accuracy}, {"training/hptuning/metric", accuracy}};
  for (MetricsSink* sink : env_.metrics_sinks) {
    if (absl::Status s = sink->Report(step, metrics, final_eval); !s.ok()) {
      Log(absl::StrCat("Warning: metrics report failed: ", s.message()));
    }
  }
  if (final_eval) {
    result->final_loss = loss;
    result->final_accuracy = accuracy;
  }
  return absl::OkStatus();
}

absl::Status Loop::Checkpoint(TrainingContext& ctx, int64_t step) {
  if (output_path_.empty() || !env_.strategy->IsChief() || step == last_checkpoint_step_) {
    return absl::OkStatus();
  }
  v1::Checkpoint checkpoint;
  if (absl::Status s = env_.strategy->Snapshot(ctx, step, &checkpoint); !s.ok()) return s;
  *checkpoint.mutable_owner() = owner_;
  if (absl::Status s = SaveCheckpoint(output_path_, checkpoint, o_.keep_checkpoints); !s.ok())
    return s;
  last_checkpoint_step_ = step;
  return absl::OkStatus();
}

absl::Status Loop::Stop(TrainingContext& ctx, int64_t step, const absl::Status& why) {
  const std::string when = absl::StrCat("at step ", step, " on ", why.message());
  if (!env_.strategy->IsChief()) {
    Log(absl::StrCat("Stopped ", when, " (the chief writes the checkpoints)"));
  } else if (output_path_.empty()) {
    Log(absl::StrCat("Stopped ", when,
                     ": no checkpoint written (no --job-dir or --output_path): a restart starts "
                     "from step 0"));
  } else {
    // The process is going away whatever happens here, so a failure (a
    // parameter server deleted first) is logged, not returned: the exit
    // code stays the stop's, and the previous checkpoint stands.
    absl::Status saved = env_.strategy->SyncVariables(ctx);
    if (saved.ok()) saved = Checkpoint(ctx, step);
    if (saved.ok()) {
      Log(absl::StrCat("Stopped ", when, ": checkpoint written to ", output_path_));
    } else {
      Log(absl::StrCat("Warning: stopped ", when, " without a checkpoint: ", saved.message(),
                       "; a restart resumes from the latest earlier checkpoint"));
    }
  }
  if (train_events_) (void)train_events_->Flush();
  if (eval_events_) (void)eval_events_->Flush();
  return WithExitCode(absl::Status(why.code(), absl::StrCat("stopped ", when)), ExitCodeFor(why));
}

absl::Status Loop::Export(TrainingContext& ctx) {
  v1::ExportedModel exported;
  *exported.mutable_graph() = ctx.model.graph.ToProto(ctx.model.num_forward_nodes);
  for (const std::string& name : ctx.model.variable_names) {
    v1::NamedTensor* t = exported.add_variables();
    t->set_name(name);
    if (absl::Status s = TensorToProto(*ctx.variables.Find(name), ctx.device, t->mutable_value());
        !s.ok()) {
      return s;
    }
  }
  exported.set_input(ctx.model.graph.OutputName(ctx.model.input));
  exported.set_logits(ctx.model.graph.OutputName(ctx.model.logits));
  exported.set_probabilities(ctx.model.graph.OutputName(ctx.model.probabilities));
  for (int64_t d : ctx.model.example_shape) exported.add_input_shape(d);
  exported.set_num_classes(ctx.model.num_classes);
  fs::path dir = fs::path(output_path_) / "export";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("create folder ", dir.string(), ": ", ec.message()));
  return WriteFileAtomically((dir / "model.pb").string(), exported.SerializeAsString());
}

absl::StatusOr<TrainResult> Loop::Run() {
  // 1. Data.
  if (o_.train_data_paths.empty()) {
    return WithExitCode(absl::InvalidArgumentError("--train_data_paths is required"), kExitUsage);
  }
  if (o_.batch_size <= 0) {
    return WithExitCode(absl::InvalidArgumentError("--batch_size must be positive"), kExitUsage);
  }
  if (o_.eval_every_steps > 0 && o_.eval_every_epochs > 0) {
    return WithExitCode(absl::InvalidArgumentError(
                            "--eval_every_steps and --eval_every_epochs are two schedules for "
                            "the same evaluations: give one"),
                        kExitUsage);
  }
  if (o_.eval_every_steps < 0 || o_.eval_every_epochs < 0) {
    return WithExitCode(
        absl::InvalidArgumentError("--eval_every_steps and --eval_every_epochs must be >= 0"),
        kExitUsage);
  }
  // The device before the data: a placement that cannot be had is a usage
  // error, found before seconds of loading.
  device_ = env_.make_device ? env_.make_device(o_) : DefaultDeviceFactory()(o_);
  if (!device_.ok()) return device_.status();
  if (*device_ == nullptr) {
    return absl::InternalError(
        absl::StrCat("--device=", o_.device, ": the factory gave no device"));
  }
  if ((*device_)->type() != DeviceType::kCpu && !env_.strategy->RunsOnAnyDevice()) {
    if (o_.device != "auto") {
      return WithExitCode(absl::InvalidArgumentError(
                              absl::StrCat("--device=", o_.device,
                                           ": this task's training strategy keeps its tensors in "
                                           "host memory; use --device=cpu")),
                          kExitUsage);
    }
    Log(absl::StrCat("Not using ", (*device_)->name(),
                     ": this task's training strategy keeps its tensors in host memory"));
    device_ = std::unique_ptr<Device>(std::make_unique<CpuDevice>(o_.threads, o_.cpu_kernels));
  }
  if ((*device_)->type() == DeviceType::kCpu) {
    Log(absl::StrCat("Device: ", (*device_)->name(), " (--device=", o_.device, "), ",
                     cpu_budget::DescribeThreads({(*device_)->num_threads(), threads_source_})));
  } else {
    Log(absl::StrCat("Device: ", (*device_)->name(), " (--device=", o_.device, ")"));
  }
  absl::StatusOr<data::Dataset> train = data::LoadDataset(o_.train_data_paths);
  if (!train.ok()) return BadInput(train.status(), "--train_data_paths");
  train_ = std::make_shared<const data::Dataset>(*std::move(train));
  if (!o_.eval_data_paths.empty()) {
    absl::StatusOr<data::Dataset> eval = data::LoadDataset(o_.eval_data_paths);
    if (!eval.ok()) return BadInput(eval.status(), "--eval_data_paths");
    if (eval->example_shape != train_->example_shape) {
      return WithExitCode(
          absl::InvalidArgumentError(absl::StrCat(
              "--eval_data_paths: examples of shape ", ShapeString(eval->example_shape),
              ", training data has ", ShapeString(train_->example_shape))),
          kExitBadInput);
    }
    eval_ = std::make_shared<const data::Dataset>(*std::move(eval));
  }
  int32_t num_classes = train_->num_classes;
  if (eval_) num_classes = std::max(num_classes, eval_->num_classes);

  // 2. Model, device, optimizer.
  absl::StatusOr<ModelSpec> spec = ResolveModelSpec(o_);
  if (!spec.ok()) return BadInput(spec.status(), "--model");
  absl::StatusOr<Model> built = BuildModel(*spec, train_->example_shape, num_classes);
  if (!built.ok()) return BadInput(built.status(), "model");
  Model model = *std::move(built);
  Device& device = **device_;
  OptimizerOptions oo;
  oo.learning_rate = o_.learning_rate;
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(o_.optimizer, oo, device);
  if (!optimizer.ok()) return WithExitCode(optimizer.status(), kExitUsage);
  VariableStore variables(&device);
  TrainingContext ctx(o_, model, device, variables, **optimizer);
  TrainingStrategy& strategy = *env_.strategy;
  const bool chief = strategy.IsChief();

  // 3. Resume from this run's own latest checkpoint, if any (checkpoint.h:
  // whose checkpoints a run restores).
  owner_ = o_.owner;
  owner_.set_model_fingerprint(
      ModelFingerprint(model.graph.ToProto(model.num_forward_nodes), o_.optimizer));
  std::optional<v1::Checkpoint> restored;
  if (!o_.output_path.empty()) {
    absl::StatusOr<OutputFolder> folder = ResolveOutputFolder(o_.output_path, owner_);
    if (!folder.ok()) {
      return folder.status().code() == absl::StatusCode::kFailedPrecondition &&
                     owner_.job_uid().empty()
                 ? WithExitCode(folder.status(), kExitUsage)
                 : BadInput(folder.status(), "resume");
    }
    output_path_ = folder->path;
    restored = std::move(folder->latest);
    if (!folder->moved_because.empty()) {
      Log(absl::StrCat("Output folder ", o_.output_path,
                       " is not this job's: ", folder->moved_because, ". This run writes to ",
                       output_path_, " instead and never restores another run's checkpoints"));
    }
  }
  absl::StatusOr<int64_t> start = strategy.Initialize(ctx, restored ? &*restored : nullptr);
  if (!start.ok()) {
    return restored ? BadInput(start.status(), "restoring the latest checkpoint") : start.status();
  }
  int64_t step = *start;
  if (restored) Log(absl::StrCat("Restored checkpoint at step ", step, " from ", output_path_));

  data::BatchOptions bo;
  bo.batch_size = o_.batch_size;
  bo.seed = o_.seed;
  bo.shard_index = strategy.shard_index();
  bo.shard_count = strategy.shard_count();
  absl::StatusOr<std::unique_ptr<data::BatchIterator>> batches =
      data::BatchIterator::Create(train_, bo, step);
  if (!batches.ok()) return BadInput(batches.status(), "--batch_size");
  int64_t max_steps = o_.max_steps;
  if (max_steps <= 0) {
    double epochs = o_.num_epochs > 0 ? o_.num_epochs : 1.0;
    max_steps = static_cast<int64_t>(
        std::ceil(epochs * static_cast<double>((*batches)->batches_per_epoch())));
  }
  // Evaluations on a step schedule (the steps of an epoch of this task's
  // shard, as max_steps counts them); otherwise every eval_every_secs.
  int64_t eval_every_steps = o_.eval_every_steps;
  if (o_.eval_every_epochs > 0) {
    eval_every_steps = std::max<int64_t>(
        1,
        std::llround(o_.eval_every_epochs * static_cast<double>((*batches)->batches_per_epoch())));
  }
  // The first scheduled step after `s` (a restored step, or the last
  // evaluation's: with asynchronous updates the global step may jump over a
  // multiple).
  auto next_eval_after = [eval_every_steps](int64_t s) {
    return (s / eval_every_steps + 1) * eval_every_steps;
  };
  int64_t next_eval_step = eval_every_steps > 0 ? next_eval_after(step) : 0;

  // 4. Outputs: graph, summaries.
  if (chief && output_path_.empty()) {
    // Legal (a quick experiment), but a finished job without a model should
    // not come as a surprise.
    Log("Warning: no --job-dir or --output_path: checkpoints, summaries and the exported model "
        "are not written, and a restarted replica starts from step 0");
  }
  if (chief && !output_path_.empty()) {
    std::error_code ec;
    fs::create_directories(output_path_, ec);
    std::string text;
    google::protobuf::TextFormat::PrintToString(model.graph.ToProto(), &text);
    if (absl::Status s =
            WriteFileAtomically((fs::path(output_path_) / "graph.pbtxt").string(), text);
        !s.ok()) {
      return s;
    }
    auto tw = summary::EventWriter::Create(output_path_);
    auto ew = summary::EventWriter::Create((fs::path(output_path_) / "eval").string());
    if (!tw.ok()) return tw.status();
    if (!ew.ok()) return ew.status();
    train_events_ = *std::move(tw);
    eval_events_ = *std::move(ew);
  }

  // 5. The loop.
  const std::string task = absl::StrCat(o_.task_type, "/", o_.task_index);
  TrainResult result;
  double window_start = env_.now();
  double last_eval = window_start, last_checkpoint = window_start;
  double loss_sum = 0, accuracy_sum = 0;
  int64_t window_steps = 0, window_start_step = step;
  // Asked before the first step too: a stop during start-up trains nothing.
  absl::Status stop = PendingStop();
  while (step < max_steps && stop.ok()) {
    data::Batch batch = (*batches)->Next();
    absl::StatusOr<TrainingStrategy::StepResult> r = strategy.Step(ctx, batch, step);
    if (!r.ok()) return r.status();
    if (!std::isfinite(r->loss)) {
      return WithExitCode(
          absl::InternalError(absl::StrCat("loss is ", r->loss, " at step ", step,
                                           " (diverged: try a lower --learning_rate)")),
          kExitNonFiniteLoss);
    }
    int64_t new_step = r->global_step;
    loss_sum += r->loss;
    accuracy_sum += r->accuracy;
    ++window_steps;
    step = new_step;
    if (env_.after_step) {
      if (absl::Status s = env_.after_step(step); !s.ok()) return s;
    }
    bool last = step >= max_steps;
    if (step % std::max<int64_t>(o_.log_every_steps, 1) == 0 || last) {
      double now = env_.now();
      double elapsed = std::max(now - window_start, 1e-9);
      double loss = loss_sum / static_cast<double>(window_steps);
      double accuracy = accuracy_sum / static_cast<double>(window_steps);
      double global_rate = static_cast<double>(step - window_start_step) / elapsed;
      double local_rate = static_cast<double>(window_steps) / elapsed;
      Log(absl::StrFormat(
          "Train [%s], step %d: loss: %.3f, accuracy: %.3f (%.3f sec) %.1f global steps/s, "
          "%.1f local steps/s",
          task, step, loss, accuracy, elapsed, global_rate, local_rate));
      if (train_events_) {
        absl::Status s =
            train_events_->WriteScalars({{"loss", static_cast<float>(loss)},
                                         {"accuracy", static_cast<float>(accuracy)},
                                         {"global_step/sec", static_cast<float>(global_rate)}},
                                        step, now);
        if (!s.ok()) Log(absl::StrCat("Warning: summaries: ", s.message()));
      }
      window_start = now;
      window_start_step = step;
      loss_sum = accuracy_sum = 0;
      window_steps = 0;
    }
    if (last) break;
    // A stop asked for during the step comes before an evaluation (it would
    // delay the stop) and before a periodic checkpoint (the stop writes one).
    stop = PendingStop();
    if (!stop.ok()) break;
    double now = env_.now();
    const bool eval_due = eval_every_steps > 0
                              ? step >= next_eval_step
                              : o_.eval_every_secs > 0 && now - last_eval >= o_.eval_every_secs;
    if (chief && eval_due) {
      if (absl::Status s = Evaluate(ctx, step, false, &result); !s.ok()) return s;
      last_eval = env_.now();
      if (eval_every_steps > 0) next_eval_step = next_eval_after(step);
    }
    bool save = o_.save_checkpoints_steps > 0 ? step % o_.save_checkpoints_steps == 0
                                              : now - last_checkpoint >= o_.save_checkpoints_secs;
    if (save) {
      if (absl::Status s = strategy.SyncVariables(ctx); !s.ok()) return s;
      if (absl::Status s = Checkpoint(ctx, step); !s.ok()) return s;
      last_checkpoint = env_.now();
    }
  }

  if (!stop.ok()) return Stop(ctx, step, stop);

  // 6. Final checkpoint, evaluation (the chief's only: the others' would
  // repeat it on the same variables) and export.
  if (absl::Status s = strategy.SyncVariables(ctx); !s.ok()) return s;
  if (absl::Status s = Checkpoint(ctx, step); !s.ok()) return s;
  if (chief) {
    if (absl::Status s = Evaluate(ctx, step, true, &result); !s.ok()) return s;
  }
  if (chief && !output_path_.empty()) {
    if (absl::Status s = Export(ctx); !s.ok()) return s;
  }
  if (train_events_) (void)train_events_->Flush();
  if (eval_events_) (void)eval_events_->Flush();
  if (absl::Status s = strategy.Finish(ctx); !s.ok()) return s;
  if (chief) {
    Log(absl::StrFormat("Final metrics after %d steps, loss: %.3f, accuracy: %.3f", step,
                        result.final_loss, result.final_accuracy));
  } else {
    Log(absl::StrFormat("Done after %d steps (the chief evaluates)", step));
  }
  result.global_step = step;
  return result;
}

}  // namespace

absl::Status CheckDevicePlacement(absl::string_view placement) {
  if (placement == "cpu" || placement == "gpu" || placement == "auto") return absl::OkStatus();
  return WithExitCode(absl::InvalidArgumentError(
                          absl::StrCat("--device must be cpu, gpu or auto, got '", placement, "'")),
                      kExitUsage);
}

namespace {
DeviceFactory& DefaultDeviceFactoryStorage() {
  static auto* factory = new DeviceFactory(CreateCpuOnlyDevice);
  return *factory;
}
}  // namespace

void SetDefaultDeviceFactory(DeviceFactory factory) {
  DefaultDeviceFactoryStorage() = factory ? std::move(factory) : DeviceFactory(CreateCpuOnlyDevice);
}

const DeviceFactory& DefaultDeviceFactory() { return DefaultDeviceFactoryStorage(); }

absl::StatusOr<std::unique_ptr<Device>> CreateCpuOnlyDevice(const TrainerOptions& options) {
  if (absl::Status s = CheckDevicePlacement(options.device); !s.ok()) return s;
  if (options.device == "gpu") {
    return WithExitCode(absl::FailedPreconditionError(
                            "--device=gpu: this trainer has no CUDA device support (built "
                            "without CUDA); use --device=cpu or --device=auto"),
                        kExitUsage);
  }
  return std::make_unique<CpuDevice>(options.threads, options.cpu_kernels);
}

absl::StatusOr<TrainResult> Train(const TrainerOptions& options, TrainerEnvironment env) {
  Loop loop(options, std::move(env));
  return loop.Run();
}

}  // namespace kubetrain::runtime::engine
