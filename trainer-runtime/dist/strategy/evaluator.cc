#include "trainer-runtime/dist/strategy/evaluator.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cpu_budget/cpu_budget.h"
#include "common/status_macros.h"
#include "trainer-runtime/data/dataset.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/model.h"
#include "trainer-runtime/exit_codes.h"
#include "trainer-runtime/summary/event_writer.h"

namespace kubetrain::dist {
namespace {

namespace fs = std::filesystem;
using namespace runtime::engine;

absl::Status BadInput(const absl::Status& s, absl::string_view what) {
  return runtime::WithExitCode(
      absl::Status(s.code(), absl::StrCat("evaluator: ", what, ": ", s.message())),
      runtime::kExitBadInput);
}

}  // namespace

absl::Status RunEvaluator(const TrainerOptions& options, std::ostream& log, absl::Duration poll) {
  if (options.output_path.empty()) {
    return runtime::WithExitCode(absl::InvalidArgumentError("the evaluator needs --output_path"),
                                 runtime::kExitUsage);
  }
  const std::string path =
      options.eval_data_paths.empty() ? options.train_data_paths : options.eval_data_paths;
  absl::StatusOr<runtime::data::Dataset> ds = runtime::data::LoadDataset(path);
  if (!ds.ok()) return BadInput(ds.status(), "eval data");
  absl::StatusOr<ModelSpec> spec = ResolveModelSpec(options);
  if (!spec.ok()) return BadInput(spec.status(), "--model");
  absl::StatusOr<Model> built = BuildModel(*spec, ds->example_shape, ds->num_classes);
  if (!built.ok()) return BadInput(built.status(), "model");
  Model model = *std::move(built);
  // Without --threads, the container's CPU budget, as the trainer's.
  const cpu_budget::CpuBudget threads = cpu_budget::ThreadsFor(options.threads);
  if (options.threads <= 0)
    log << "Evaluator: " << cpu_budget::DescribeThreads(threads) << std::endl;
  CpuDevice device(threads.threads, options.cpu_kernels);
  OptimizerOptions oo;
  oo.learning_rate = options.learning_rate;
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   Optimizer::Create(options.optimizer, oo, device));
  VariableStore variables;
  TrainingContext ctx(options, model, device, variables, *optimizer);
  // The folder the chief writes to by the same rule (checkpoint.h); the
  // evaluator builds its graph from the eval data, so the model fingerprint
  // is not compared.
  v1::CheckpointOwner me = options.owner;
  me.clear_model_fingerprint();
  absl::StatusOr<OutputFolder> folder = ResolveOutputFolder(options.output_path, me);
  if (!folder.ok()) return BadInput(folder.status(), "--output_path");
  const std::string dir = folder->path;
  if (!folder->moved_because.empty()) {
    log << "Output folder " << options.output_path
        << " is not this job's: " << folder->moved_because << ". Evaluating the checkpoints in "
        << dir << std::endl;
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::summary::EventWriter> events,
      runtime::summary::EventWriter::Create((fs::path(dir) / "eval_evaluator").string()));
  const fs::path exported = fs::path(dir) / "export" / "model.pb";

  std::string evaluated;
  for (;;) {
    // Look for the export first: a checkpoint found after it is the last.
    const bool finished = fs::exists(exported);
    absl::StatusOr<std::optional<std::string>> latest = LatestCheckpoint(dir);
    if (!latest.ok()) return BadInput(latest.status(), "--output_path");
    if (latest->has_value() && **latest != evaluated) {
      absl::StatusOr<v1::Checkpoint> checkpoint = ReadCheckpoint(**latest);
      // A checkpoint pruned between the listing and the read: look again.
      if (!checkpoint.ok() && fs::exists(**latest)) return BadInput(checkpoint.status(), **latest);
      if (checkpoint.ok()) {
        if (absl::Status s = ctx.RestoreLocal(*checkpoint); !s.ok()) return BadInput(s, **latest);
        const int64_t bs = std::max<int64_t>(options.eval_batch_size, 1);
        const int64_t example_size = ds->example_size();
        double loss = 0, accuracy = 0;
        runtime::data::Batch batch;
        for (int64_t start = 0; start < ds->num_examples; start += bs) {
          const int64_t n = std::min(bs, ds->num_examples - start);
          batch.size = n;
          batch.features.assign(ds->features.begin() + start * example_size,
                                ds->features.begin() + (start + n) * example_size);
          batch.labels.assign(ds->labels.begin() + start, ds->labels.begin() + start + n);
          ASSIGN_OR_RETURN(auto r, ctx.Evaluate(batch));
          loss += static_cast<double>(r.first) * n;
          accuracy += static_cast<double>(r.second) * n;
        }
        const double total = static_cast<double>(std::max<int64_t>(ds->num_examples, 1));
        loss /= total;
        accuracy /= total;
        const int64_t step = checkpoint->global_step();
        log << absl::StrFormat("Evaluator, step %d: loss: %.3f, accuracy: %.3f", step, loss,
                               accuracy)
            << std::endl;
        RETURN_IF_ERROR(events->WriteScalars(
            {{"loss", static_cast<float>(loss)}, {"accuracy", static_cast<float>(accuracy)}}, step,
            absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())));
        RETURN_IF_ERROR(events->Flush());
        evaluated = **latest;
      }
      continue;
    }
    if (finished) return absl::OkStatus();
    // Checkpoints appear on a shared file system with no notification to
    // wait on: look again after `poll`.
    absl::SleepFor(poll);
  }
}

}  // namespace kubetrain::dist
