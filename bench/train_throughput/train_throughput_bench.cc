// kubetrain's side of bench/train_throughput: trains one of the built-in
// models through the real training path (BatchIterator -> TrainingContext
// -> Optimizer) on Fashion-MNIST and prints samples/s; also measures this
// machine's FP32 FMA peak and OpenBLAS's sgemm rate for the MLP's first
// layer.
//
//   mlp: 784-256-128-10, ReLU, SGD lr 0.1, batch 128, float32
//   cnn: examples/models/cnn.yaml's layers (conv32-pool-conv64-pool-
//        dense128-dropout-dense10), Adam lr 0.001, batch 128, float32
//
//   train_throughput_bench --model=mlp|cnn --threads=N|auto|all [--steps=S]
//       [--cpu_kernels=onednn|blas] [--data=IMAGES.gz]
//   train_throughput_bench --peak --threads=N
//
// --threads=auto sizes the pool as kubetrain-runtime does by default (the
// container's CPU budget, common/cpu_budget/cpu_budget.h); --threads=all
// takes every core the node has (std::thread::hardware_concurrency), as
// kubetrain-runtime did before it read its budget (cpu_quota.sh compares
// the three under a CPU limit).
//
// Output: one "key=value ..." line per measurement, parsed by run.sh.
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/cpu_budget/cpu_budget.h"
#include "trainer-runtime/data/batch_iterator.h"
#include "trainer-runtime/data/dataset.h"
#include "trainer-runtime/engine/trainer.h"

namespace kubetrain::runtime::engine {
namespace {

// Process CPU time (all threads), for the per-CPU-second figure that a
// shared machine does not distort as much as wall time.
double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Ten independent FMA chains per thread, in named registers (an array would
// be kept in memory), hide the FMA latency; the result is kept live so the
// loop is not optimised away.
#define KT_FMA_CHAINS(T, SET, FMA, ADD)                                             \
  T a0 = SET(1.0f), a1 = SET(1.1f), a2 = SET(1.2f), a3 = SET(1.3f), a4 = SET(1.4f); \
  T a5 = SET(1.5f), a6 = SET(1.6f), a7 = SET(1.7f), a8 = SET(1.8f), a9 = SET(1.9f); \
  const T m = SET(0.999999f), c = SET(1e-7f);                                       \
  for (int64_t i = 0; i < iterations; ++i) {                                        \
    a0 = FMA(a0, m, c);                                                             \
    a1 = FMA(a1, m, c);                                                             \
    a2 = FMA(a2, m, c);                                                             \
    a3 = FMA(a3, m, c);                                                             \
    a4 = FMA(a4, m, c);                                                             \
    a5 = FMA(a5, m, c);                                                             \
    a6 = FMA(a6, m, c);                                                             \
    a7 = FMA(a7, m, c);                                                             \
    a8 = FMA(a8, m, c);                                                             \
    a9 = FMA(a9, m, c);                                                             \
  }                                                                                 \
  T s = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))), ADD(a8, a9));

__attribute__((target("avx2,fma"))) double FmaLoopAvx2(int64_t iterations) {
  KT_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) double FmaLoopAvx512(int64_t iterations) {
  KT_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
  return _mm512_reduce_add_ps(s);
}

// GFLOP/s of `threads` threads running the loop at once.
double FmaPeak(int threads, bool avx512) {
  const int64_t iterations = 20'000'000;
  const double flops_per_iteration = 10.0 * (avx512 ? 16 : 8) * 2;
  std::atomic<double> sink{0};
  double start = Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      double r = avx512 ? FmaLoopAvx512(iterations) : FmaLoopAvx2(iterations);
      double expected = sink.load();
      while (!sink.compare_exchange_weak(expected, expected + r)) {
      }
    });
  }
  for (auto& t : pool) t.join();
  double seconds = Now() - start;
  if (sink.load() == 12345.0) std::cerr << "";
  return flops_per_iteration * static_cast<double>(iterations) * threads / seconds / 1e9;
}

double SgemmRate(int threads) {
  openblas_set_num_threads(threads);
  const int m = 128, k = 784, n = 256;
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  for (int i = 0; i < 20; ++i) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n,
                0.0f, c.data(), n);
  }
  const int reps = 2000;
  double start = Now();
  for (int i = 0; i < reps; ++i) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n,
                0.0f, c.data(), n);
  }
  return 2.0 * m * n * k * reps / (Now() - start) / 1e9;
}

int Main(int argc, char** argv) {
  int threads = 1;
  int64_t steps = 1000;
  bool peak = false;
  std::string model_name = "mlp";
  CpuKernels kernels = DefaultCpuKernels();
  std::string data = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads=auto") {
      threads = cpu_budget::DetectCpuBudget().threads;
    } else if (a == "--threads=all") {
      threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::stoi(a.substr(10));
    } else if (a.rfind("--steps=", 0) == 0) {
      steps = std::stoll(a.substr(8));
    } else if (a.rfind("--data=", 0) == 0) {
      data = a.substr(7);
    } else if (a.rfind("--model=", 0) == 0) {
      model_name = a.substr(8);
    } else if (a.rfind("--cpu_kernels=", 0) == 0) {
      absl::StatusOr<CpuKernels> parsed = ParseCpuKernels(a.substr(14));
      if (!parsed.ok()) {
        std::cerr << "--cpu_kernels: " << parsed.status().message() << "\n";
        return 2;
      }
      kernels = *parsed;
    } else if (a == "--peak") {
      peak = true;
    } else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  if (model_name != "mlp" && model_name != "cnn") {
    std::cerr << "--model: want mlp or cnn, got " << model_name << "\n";
    return 2;
  }
  if (peak) {
    double avx2 = FmaPeak(threads, false);
    double avx512 = __builtin_cpu_supports("avx512f") ? FmaPeak(threads, true) : 0.0;
    std::cout << "fma threads=" << threads << " avx2_gflops=" << avx2 << " avx512_gflops=" << avx512
              << " sgemm_gflops=" << SgemmRate(threads) << std::endl;
    return 0;
  }

  absl::StatusOr<data::Dataset> ds = data::LoadDataset(data);
  if (!ds.ok()) {
    std::cerr << ds.status() << "\n";
    return 3;
  }
  auto dataset = std::make_shared<data::Dataset>(*std::move(ds));
  const bool cnn = model_name == "cnn";
  // The MLP reads flat examples, the CNN 28x28x1 images.
  dataset->example_shape = cnn ? Shape{28, 28, 1} : Shape{784};
  TrainerOptions options;
  options.seed = 1;
  absl::StatusOr<Model> model =
      BuildModel(cnn ? CnnSpec() : MlpSpec(256, 128), dataset->example_shape, dataset->num_classes);
  if (!model.ok()) {
    std::cerr << model.status() << "\n";
    return 1;
  }
  CpuDevice device(threads, kernels);
  VariableStore variables;
  if (!InitializeVariables(model->graph, 1, variables).ok()) return 1;
  OptimizerOptions oo;
  oo.learning_rate = cnn ? 0.001 : 0.1;
  auto optimizer = Optimizer::Create(cnn ? "adam" : "sgd", oo, device);
  TrainingContext ctx(options, *model, device, variables, **optimizer);
  LocalStrategy strategy;
  data::BatchOptions bo;
  bo.batch_size = 128;
  bo.seed = 1;
  bo.prefetch = 0;  // batches built inline, as the peers do
  data::BatchIterator batches(dataset, bo);
  auto run = [&](int64_t n, int64_t first_step) {
    float loss = 0;
    for (int64_t s = 0; s < n; ++s) {
      data::Batch batch = batches.Next();
      auto r = strategy.Step(ctx, batch, first_step + s);
      if (!r.ok()) {
        std::cerr << r.status() << "\n";
        std::exit(1);
      }
      loss = r->loss;
    }
    return loss;
  };
  // Warm-up: buffers allocated, primitives created, threads started.
  const int64_t warmup = cnn ? 10 : 50;
  run(warmup, 0);
  double start = Now();
  double cpu_start = CpuNow();
  float loss = run(steps, warmup);
  double seconds = Now() - start;
  double cpu_seconds = CpuNow() - cpu_start;
  std::cout << "kubetrain model=" << model_name << " cpu_kernels=" << CpuKernelsName(kernels)
            << " threads=" << threads << " samples_per_sec=" << steps * 128 / seconds
            << " samples_per_cpu_sec=" << steps * 128 / cpu_seconds << " loss=" << loss
            << std::endl;
  return 0;
}

}  // namespace
}  // namespace kubetrain::runtime::engine

int main(int argc, char** argv) { return kubetrain::runtime::engine::Main(argc, argv); }
