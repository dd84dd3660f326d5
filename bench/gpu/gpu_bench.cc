// GPU checks that need a device, run by bench/gpu/run.sh on a machine with
// one: training throughput of the MLP and the CNN on the CUDA device beside
// the time the same GEMM shapes take in plain cuBLAS, and Fashion-MNIST MLP
// accuracy on the GPU beside the CPU device with the same seed.
//
//   gpu_bench --mode=throughput|fmnist|all|none|cpu-selfcheck [--data=DIR] [--tf32] [--steps=N]
// (none: only report the device, or exit 2 without one; cpu-selfcheck: the
// bench's host logic on the CPU device, no GPU needed)
//
// Exit status: 0 when the figures were produced, 1 on an error, 2 when no
// CUDA device is visible (the script reports the checks as not run).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "trainer-runtime/cuda/cuda_check.h"
#include "trainer-runtime/cuda/cuda_device.h"
#include "trainer-runtime/data/dataset.h"
#include "trainer-runtime/engine/executor.h"
#include "trainer-runtime/engine/model.h"
#include "trainer-runtime/engine/op_registry.h"
#include "trainer-runtime/engine/optimizer.h"
#include "trainer-runtime/engine/variable_store.h"

namespace kubetrain::runtime::cuda {
namespace {

using engine::Device;
using engine::Executor;
using engine::Feed;
using engine::Model;
using engine::Output;
using engine::Shape;
using engine::Tensor;
using engine::VariableStore;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define BENCH_RETURN_IF_ERROR(expr)                \
  do {                                             \
    absl::Status bench_status_ = (expr);           \
    if (!bench_status_.ok()) return bench_status_; \
  } while (false)

// A variable store on `device` holding `host`'s values.
absl::StatusOr<VariableStore> PlaceVariables(const VariableStore& host, Device& device) {
  VariableStore store;
  for (const auto& [name, value] : host.values()) {
    Tensor t = device.Allocate(value.shape());
    BENCH_RETURN_IF_ERROR(device.CopyFromHost(value, t));
    BENCH_RETURN_IF_ERROR(store.Create(name, t));
  }
  return store;
}

// One training replica on one device: the model's graph, its variables
// there, an optimizer, and reusable feed tensors.
class Replica {
 public:
  Replica(const Model& model, Device& device, VariableStore variables,
          std::unique_ptr<engine::Optimizer> optimizer)
      : model_(model),
        device_(device),
        variables_(std::move(variables)),
        optimizer_(std::move(optimizer)),
        executor_(model_.graph, device_, variables_) {
    train_fetches_ = {model_.loss, model_.accuracy};
    train_fetches_.insert(train_fetches_.end(), model_.gradients.begin(), model_.gradients.end());
  }

  // Copies a host batch to the device (a no-op copy on the CPU device);
  // `pinned`: by DMA from pinned buffers the caller leaves unchanged.
  absl::Status Feed(const Tensor& features, const Tensor& labels, bool pinned = false) {
    if (device_.type() == engine::DeviceType::kCpu) {
      features_ = features;
      labels_ = labels;
      return absl::OkStatus();
    }
    if (!features_.valid() || features_.shape() != features.shape())
      features_ = device_.Allocate(features.shape());
    if (!labels_.valid() || labels_.shape() != labels.shape())
      labels_ = device_.Allocate(labels.shape());
    if (pinned) {
      auto& gpu = static_cast<CudaDevice&>(device_);
      BENCH_RETURN_IF_ERROR(gpu.CopyFromHostAsync(features, features_));
      return gpu.CopyFromHostAsync(labels, labels_);
    }
    BENCH_RETURN_IF_ERROR(device_.CopyFromHost(features, features_));
    return device_.CopyFromHost(labels, labels_);
  }

  absl::Status TrainStep(int64_t step) {
    std::vector<engine::Feed> feeds = {{model_.input, features_}, {model_.labels, labels_}};
    engine::RunContext run{.training = true, .seed = 1, .step = step};
    BENCH_RETURN_IF_ERROR(executor_.Run(feeds, train_fetches_, &results_, run));
    gradients_.clear();
    for (size_t i = 0; i < model_.variable_names.size(); ++i) {
      gradients_.push_back({model_.variable_names[i], results_[2 + i]});
    }
    return optimizer_->Apply(variables_, gradients_);
  }

  // Number of correct predictions in the fed batch.
  absl::StatusOr<double> Correct() {
    std::vector<engine::Feed> feeds = {{model_.input, features_}, {model_.labels, labels_}};
    BENCH_RETURN_IF_ERROR(executor_.Run(feeds, std::vector<Output>{model_.accuracy}, &results_));
    Tensor host = Tensor::Host({});
    if (device_.type() == engine::DeviceType::kCpu) {
      host = results_[0];
    } else {
      BENCH_RETURN_IF_ERROR(device_.CopyToHost(results_[0], host));
    }
    return static_cast<double>(host.at(0)) * static_cast<double>(features_.dim(0));
  }

  Executor& executor() { return executor_; }
  const Tensor& features() const { return features_; }
  const Tensor& labels() const { return labels_; }

 private:
  const Model& model_;
  Device& device_;
  VariableStore variables_;
  std::unique_ptr<engine::Optimizer> optimizer_;
  Executor executor_;
  std::vector<Output> train_fetches_;
  std::vector<Tensor> results_;
  std::vector<engine::NamedGradient> gradients_;
  Tensor features_, labels_;
};

struct GemmShape {
  bool ta, tb;
  int64_t m, n, k;
};

// The GEMMs one training step issues, read from the graph and the shapes
// of each GEMM op's inputs in an actual run (the same arithmetic as the
// CUDA kernels: MatMul directly, convolutions as im2col GEMMs).
absl::StatusOr<std::vector<GemmShape>> StepGemms(const Model& model, Replica& replica) {
  std::vector<Output> fetches;
  std::vector<int> nodes;
  for (const engine::Node& node : model.graph.nodes()) {
    if (node.op == "MatMul" || node.op == "Conv2D" || node.op == "Conv2DBackpropInput" ||
        node.op == "Conv2DBackpropFilter") {
      nodes.push_back(node.id);
      for (const Output& in : node.inputs) fetches.push_back(in);
    }
  }
  std::vector<engine::Feed> feeds = {{model.input, replica.features()},
                                     {model.labels, replica.labels()}};
  std::vector<Tensor> values;
  BENCH_RETURN_IF_ERROR(replica.executor().Run(feeds, fetches, &values, {.training = true}));
  std::vector<GemmShape> gemms;
  size_t v = 0;
  for (int id : nodes) {
    const engine::Node& node = model.graph.node(id);
    auto in = [&](size_t i) -> const Shape& { return values[v + i].shape(); };
    if (node.op == "MatMul") {
      bool ta = node.GetBool("transpose_a"), tb = node.GetBool("transpose_b");
      int64_t m = ta ? in(0)[1] : in(0)[0], k = ta ? in(0)[0] : in(0)[1],
              n = tb ? in(1)[0] : in(1)[1];
      gemms.push_back({ta, tb, m, n, k});
    } else {
      // Input image, filter (HWIO) per op's input order.
      const Shape& x = node.op == "Conv2D"                ? in(0)
                       : node.op == "Conv2DBackpropInput" ? in(2)
                                                          : in(0);
      const Shape& f = node.op == "Conv2D"                ? in(1)
                       : node.op == "Conv2DBackpropInput" ? in(1)
                                                          : in(2);
      int64_t stride = node.GetInt("stride", 1);
      std::string padding = node.GetString("padding", "SAME");
      auto gh = engine::ComputeWindow(x[1], f[0], stride, padding);
      auto gw = engine::ComputeWindow(x[2], f[1], stride, padding);
      if (!gh.ok() || !gw.ok()) return absl::InternalError("bad conv geometry");
      int64_t rows = x[0] * gh->out * gw->out, patch = f[0] * f[1] * f[2], out_c = f[3];
      if (node.op == "Conv2D") gemms.push_back({false, false, rows, out_c, patch});
      if (node.op == "Conv2DBackpropInput") gemms.push_back({false, true, rows, patch, out_c});
      if (node.op == "Conv2DBackpropFilter") gemms.push_back({true, false, patch, out_c, rows});
    }
    v += node.inputs.size();
  }
  return gemms;
}

// Seconds per step for the GEMMs alone in plain cuBLAS (same handle
// settings as the device's), averaged over `reps` steps after a warm-up.
absl::StatusOr<double> CublasStepSeconds(CudaDevice& gpu, const std::vector<GemmShape>& gemms,
                                         int reps) {
  BENCH_RETURN_IF_ERROR(gpu.MakeCurrent());
  struct Buffers {
    float *a, *b, *c;
  };
  std::vector<Buffers> buffers;
  for (const GemmShape& g : gemms) {
    Buffers b{};
    CUDA_CHECK(cudaMalloc(&b.a, sizeof(float) * static_cast<size_t>(g.m * g.k)));
    CUDA_CHECK(cudaMalloc(&b.b, sizeof(float) * static_cast<size_t>(g.k * g.n)));
    CUDA_CHECK(cudaMalloc(&b.c, sizeof(float) * static_cast<size_t>(g.m * g.n)));
    CUDA_CHECK(cudaMemsetAsync(b.a, 0, sizeof(float) * static_cast<size_t>(g.m * g.k),
                               gpu.compute_stream()));
    CUDA_CHECK(cudaMemsetAsync(b.b, 0, sizeof(float) * static_cast<size_t>(g.k * g.n),
                               gpu.compute_stream()));
    buffers.push_back(b);
  }
  const float alpha = 1.0f, beta = 0.0f;
  auto step = [&]() -> absl::Status {
    for (size_t i = 0; i < gemms.size(); ++i) {
      const GemmShape& g = gemms[i];
      CUBLAS_CHECK(gpu.cublas_api().sgemm(
          gpu.cublas(), g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, g.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
          static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &alpha, buffers[i].b,
          static_cast<int>(g.tb ? g.k : g.n), buffers[i].a, static_cast<int>(g.ta ? g.m : g.k),
          &beta, buffers[i].c, static_cast<int>(g.n)));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < 3; ++i) BENCH_RETURN_IF_ERROR(step());
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, gpu.compute_stream()));
  for (int i = 0; i < reps; ++i) BENCH_RETURN_IF_ERROR(step());
  CUDA_CHECK(cudaEventRecord(stop, gpu.compute_stream()));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  for (Buffers& b : buffers) {
    cudaFree(b.a);
    cudaFree(b.b);
    cudaFree(b.c);
  }
  return ms / 1000.0 / reps;
}

Tensor RandomFeatures(const Shape& shape, uint32_t seed) {
  Tensor t = PinnedHostTensor(shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data()[i] = dist(rng);
  return t;
}

absl::Status Throughput(CudaDevice& gpu, int steps) {
  std::printf(
      "== throughput: SGD lr 0.1, synthetic batches uploaded from pinned memory every step%s\n",
      gpu.allow_tf32() ? ", TF32 allowed" : ", FP32 (no TF32)");
  std::printf("%-5s %6s %14s %12s %14s %16s %10s\n", "model", "batch", "samples/s", "step ms",
              "cublas ms", "cublas samples/s", "fraction");
  for (std::string name : {"mlp", "cnn"}) {
    for (int64_t batch : {128, 1024}) {
      Shape example = name == "mlp" ? Shape{784} : Shape{28, 28, 1};
      auto model =
          engine::BuildModel(name == "mlp" ? engine::MlpSpec() : engine::CnnSpec(), example, 10);
      if (!model.ok()) return model.status();
      VariableStore host_vars;
      BENCH_RETURN_IF_ERROR(engine::InitializeVariables(model->graph, 1, host_vars));
      auto vars = PlaceVariables(host_vars, gpu);
      if (!vars.ok()) return vars.status();
      engine::OptimizerOptions options;
      options.learning_rate = 0.1;
      auto optimizer = engine::Optimizer::Create("sgd", options, gpu);
      if (!optimizer.ok()) return optimizer.status();
      Replica replica(*model, gpu, *std::move(vars), *std::move(optimizer));
      Shape batch_shape = {batch};
      batch_shape.insert(batch_shape.end(), example.begin(), example.end());
      Tensor features = RandomFeatures(batch_shape, 2);
      Tensor labels = PinnedHostTensor({batch});
      for (int64_t i = 0; i < batch; ++i) labels.data()[i] = static_cast<float>(i % 10);
      BENCH_RETURN_IF_ERROR(replica.Feed(features, labels));
      for (int i = 0; i < 5; ++i) BENCH_RETURN_IF_ERROR(replica.TrainStep(i));
      BENCH_RETURN_IF_ERROR(gpu.Synchronize());
      int n = name == "mlp" ? steps : std::max(steps / 4, 20);
      double start = Now();
      for (int i = 0; i < n; ++i) {
        BENCH_RETURN_IF_ERROR(replica.Feed(features, labels, /*pinned=*/true));
        BENCH_RETURN_IF_ERROR(replica.TrainStep(5 + i));
      }
      BENCH_RETURN_IF_ERROR(gpu.Synchronize());
      double step_s = (Now() - start) / n;
      auto gemms = StepGemms(*model, replica);
      if (!gemms.ok()) return gemms.status();
      auto cublas_s = CublasStepSeconds(gpu, *gemms, 50);
      if (!cublas_s.ok()) return cublas_s.status();
      double samples = static_cast<double>(batch) / step_s;
      double cublas_samples = static_cast<double>(batch) / *cublas_s;
      std::printf("%-5s %6lld %14.0f %12.3f %14.3f %16.0f %10.2f\n", name.c_str(),
                  static_cast<long long>(batch), samples, step_s * 1e3, *cublas_s * 1e3,
                  cublas_samples, samples / cublas_samples);
    }
  }
  std::printf(
      "fraction = achieved samples/s / (batch / time of the step's GEMMs in plain cuBLAS); target "
      ">= 0.6 "
      "at batch 1024\n");
  return absl::OkStatus();
}

// One epoch of the MLP (784-256-128-10, Adam lr 0.001, batch 128) on
// `device`, then test accuracy. The same seed, shuffle and initial weights
// on every device.
absl::StatusOr<double> FmnistAccuracy(Device& device, const data::Dataset& train,
                                      const data::Dataset& test, int epochs) {
  auto model = engine::BuildModel(engine::MlpSpec(), {784}, train.num_classes);
  if (!model.ok()) return model.status();
  VariableStore host_vars;
  BENCH_RETURN_IF_ERROR(engine::InitializeVariables(model->graph, 7, host_vars));
  VariableStore vars;
  if (device.type() == engine::DeviceType::kCpu) {
    vars = std::move(host_vars);
  } else {
    auto placed = PlaceVariables(host_vars, device);
    if (!placed.ok()) return placed.status();
    vars = *std::move(placed);
  }
  engine::OptimizerOptions options;
  options.learning_rate = 0.001;
  auto optimizer = engine::Optimizer::Create("adam", options, device);
  if (!optimizer.ok()) return optimizer.status();
  Replica replica(*model, device, std::move(vars), *std::move(optimizer));
  const int64_t batch = 128, dim = 784;
  int64_t n = static_cast<int64_t>(train.labels.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(7);
  int64_t step = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t b = 0; b < n; b += batch) {
      int64_t size = std::min(batch, n - b);
      Tensor x = Tensor::Host({size, dim});
      Tensor y = Tensor::Host({size});
      for (int64_t i = 0; i < size; ++i) {
        int64_t e = order[static_cast<size_t>(b + i)];
        std::memcpy(x.data() + i * dim, train.features.data() + e * dim, sizeof(float) * dim);
        y.data()[i] = static_cast<float>(train.labels[static_cast<size_t>(e)]);
      }
      BENCH_RETURN_IF_ERROR(replica.Feed(x, y));
      BENCH_RETURN_IF_ERROR(replica.TrainStep(step++));
    }
  }
  double correct = 0;
  int64_t m = static_cast<int64_t>(test.labels.size());
  for (int64_t b = 0; b < m; b += 1000) {
    int64_t size = std::min<int64_t>(1000, m - b);
    Tensor x = Tensor::Host({size, dim});
    Tensor y = Tensor::Host({size});
    std::memcpy(x.data(), test.features.data() + b * dim,
                sizeof(float) * static_cast<size_t>(size * dim));
    for (int64_t i = 0; i < size; ++i)
      y.data()[i] = static_cast<float>(test.labels[static_cast<size_t>(b + i)]);
    BENCH_RETURN_IF_ERROR(replica.Feed(x, y));
    auto c = replica.Correct();
    if (!c.ok()) return c.status();
    correct += *c;
  }
  return correct / static_cast<double>(m);
}

absl::Status Fmnist(CudaDevice& gpu, const std::string& dir) {
  auto train = data::LoadDataset(dir + "/train-images-idx3-ubyte.gz");
  if (!train.ok()) return train.status();
  auto test = data::LoadDataset(dir + "/t10k-images-idx3-ubyte.gz");
  if (!test.ok()) return test.status();
  std::printf("== Fashion-MNIST MLP 784-256-128-10, Adam lr 0.001, batch 128, 1 epoch, seed 7\n");
  double t0 = Now();
  auto gpu_acc = FmnistAccuracy(gpu, *train, *test, 1);
  if (!gpu_acc.ok()) return gpu_acc.status();
  double t1 = Now();
  engine::CpuDevice cpu;
  auto cpu_acc = FmnistAccuracy(cpu, *train, *test, 1);
  if (!cpu_acc.ok()) return cpu_acc.status();
  double t2 = Now();
  std::printf(
      "test accuracy: gpu %.4f (%.1f s)  cpu %.4f (%.1f s)  |gpu - cpu| %.4f  (issue: >= 0.82 "
      "after 1 epoch)\n",
      *gpu_acc, t1 - t0, *cpu_acc, t2 - t1, std::fabs(*gpu_acc - *cpu_acc));
  return absl::OkStatus();
}

// The bench's own host logic on the CPU device, for machines without a GPU:
// the GEMM shapes a training step issues and the CPU half of the accuracy
// comparison.
absl::Status CpuSelfCheck(const std::string& dir) {
  engine::CpuDevice cpu;
  for (std::string name : {"mlp", "cnn"}) {
    Shape example = name == "mlp" ? Shape{784} : Shape{28, 28, 1};
    auto model =
        engine::BuildModel(name == "mlp" ? engine::MlpSpec() : engine::CnnSpec(), example, 10);
    if (!model.ok()) return model.status();
    VariableStore vars;
    BENCH_RETURN_IF_ERROR(engine::InitializeVariables(model->graph, 1, vars));
    auto optimizer = engine::Optimizer::Create("sgd", {.learning_rate = 0.1}, cpu);
    if (!optimizer.ok()) return optimizer.status();
    Replica replica(*model, cpu, std::move(vars), *std::move(optimizer));
    Shape batch_shape = {128};
    batch_shape.insert(batch_shape.end(), example.begin(), example.end());
    Tensor labels = Tensor::Host({128});
    for (int64_t i = 0; i < 128; ++i) labels.data()[i] = static_cast<float>(i % 10);
    Tensor features = Tensor::Filled(batch_shape, 0.5f);
    BENCH_RETURN_IF_ERROR(replica.Feed(features, labels));
    BENCH_RETURN_IF_ERROR(replica.TrainStep(0));
    auto gemms = StepGemms(*model, replica);
    if (!gemms.ok()) return gemms.status();
    std::printf("%s batch 128: %zu GEMMs per step:", name.c_str(), gemms->size());
    for (const GemmShape& g : *gemms) {
      std::printf(" %s%lldx%lldx%lld",
                  g.ta   ? "T"
                  : g.tb ? "t"
                         : "",
                  static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k));
    }
    std::printf("\n");
  }
  auto train = data::LoadDataset(dir + "/train-images-idx3-ubyte.gz");
  if (!train.ok()) return train.status();
  auto test = data::LoadDataset(dir + "/t10k-images-idx3-ubyte.gz");
  if (!test.ok()) return test.status();
  double t0 = Now();
  auto acc = FmnistAccuracy(cpu, *train, *test, 1);
  if (!acc.ok()) return acc.status();
  std::printf("cpu test accuracy after 1 epoch: %.4f (%.1f s)\n", *acc, Now() - t0);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::string mode = "all", data_dir = "/usr/share/datasets/fashion-mnist";
  bool tf32 = false;
  int steps = 200;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--mode=", 0) == 0) {
      mode = arg.substr(7);
    } else if (arg.rfind("--data=", 0) == 0) {
      data_dir = arg.substr(7);
    } else if (arg == "--tf32") {
      tf32 = true;
    } else if (arg.rfind("--steps=", 0) == 0) {
      steps = std::max(1, std::atoi(arg.c_str() + 8));
    } else {
      std::fprintf(
          stderr,
          "unknown flag %s (want --mode=throughput|fmnist|all --data=DIR --tf32 --steps=N)\n",
          arg.c_str());
      return 1;
    }
  }
  if (mode == "cpu-selfcheck") {
    absl::Status s = CpuSelfCheck(data_dir);
    if (!s.ok()) std::fprintf(stderr, "gpu_bench: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  if (VisibleDeviceCount() == 0) {
    std::printf("no CUDA device visible: GPU checks not run\n");
    return 2;
  }
  CudaDeviceOptions options;
  options.allow_tf32 = tf32;
  auto gpu = CudaDevice::Create(options);
  if (!gpu.ok()) {
    std::fprintf(stderr, "%s\n", std::string(gpu.status().message()).c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs, %.0f GiB\n", prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  absl::Status s;
  if (mode != "throughput" && mode != "fmnist" && mode != "all" && mode != "none") {
    std::fprintf(stderr, "unknown --mode=%s\n", mode.c_str());
    return 1;
  }
  if (mode == "throughput" || mode == "all") s = Throughput(**gpu, steps);
  if (s.ok() && (mode == "fmnist" || mode == "all")) s = Fmnist(**gpu, data_dir);
  if (!s.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kubetrain::runtime::cuda

int main(int argc, char** argv) { return kubetrain::runtime::cuda::Main(argc, argv); }
