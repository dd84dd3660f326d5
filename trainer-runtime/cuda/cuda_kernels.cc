// The CUDA kernel table: engine kernels that read the node's attributes and
// the tensors' shapes on the host and queue the device work (cuBLAS for the
// GEMMs, our kernels in cuda_kernels.cu for the rest) on the device's
// compute stream.
#include "trainer-runtime/cuda/cuda_kernels.h"

#include <climits>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/cuda/cuda_check.h"
#include "trainer-runtime/cuda/cuda_device.h"
#include "trainer-runtime/cuda/cuda_launch.h"
#include "trainer-runtime/engine/op_list.h"
#include "trainer-runtime/engine/op_registry.h"

namespace kubetrain::runtime::cuda {

namespace {

using engine::KernelContext;
using engine::Node;
using engine::Tensor;

CudaDevice& Dev(const KernelContext& c) { return static_cast<CudaDevice&>(c.device); }
cudaStream_t Stream(const KernelContext& c) { return Dev(c).compute_stream(); }

absl::Status KernelError(const KernelContext& c, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", c.node.name, "' (", c.node.op, "): ", what));
}

// Kernels dereference device pointers only; a host tensor here would be a
// placement bug above the kernel layer, reported instead of crashing.
absl::Status CheckPlacement(const KernelContext& c) {
  for (const Tensor* t : c.inputs) {
    if (t->num_elements() > 0 && t->device_type() != engine::DeviceType::kCuda) {
      return KernelError(c,
                         "an input is in host memory (feed tensors through Device::CopyFromHost)");
    }
  }
  return absl::OkStatus();
}

// Row-major C[m,n] = op(A) op(B) through column-major cuBLAS: C^T = op(B)^T op(A)^T.
absl::Status Gemm(const KernelContext& c, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const float* a, const float* b, float* out) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return KernelError(c, "GEMM dimension exceeds 2^31");
  const float alpha = 1.0f, beta = 0.0f;
  int lda = static_cast<int>(ta ? m : k);
  int ldb = static_cast<int>(tb ? k : n);
  CUBLAS_CHECK(Dev(c).cublas_api().sgemm(Dev(c).cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                         static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb,
                                         a, lda, &beta, out, static_cast<int>(n)));
  return absl::OkStatus();
}

absl::Status ConstKernel(KernelContext& c) {
  CUDA_CHECK(LaunchFill(Stream(c), c.output(0).data(), c.output(0).num_elements(),
                        static_cast<float>(c.node.GetFloat("value"))));
  return absl::OkStatus();
}

absl::Status ZerosLikeKernel(KernelContext& c) {
  CUDA_CHECK(LaunchFill(Stream(c), c.output(0).data(), c.output(0).num_elements(), 0.0f));
  return absl::OkStatus();
}

absl::Status MatMulKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  bool ta = c.node.GetBool("transpose_a"), tb = c.node.GetBool("transpose_b");
  int64_t m = c.output(0).dim(0), n = c.output(0).dim(1);
  int64_t k = ta ? a.dim(0) : a.dim(1);
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    CUDA_CHECK(LaunchFill(Stream(c), c.output(0).data(), m * n, 0.0f));
    return absl::OkStatus();
  }
  return Gemm(c, ta, tb, m, n, k, a.data(), b.data(), c.output(0).data());
}

Activation ParseActivation(const Node& node) {
  std::string a = node.GetString("activation", "linear");
  if (a == "relu") return Activation::kRelu;
  if (a == "tanh") return Activation::kTanh;
  if (a == "sigmoid") return Activation::kSigmoid;
  return Activation::kLinear;
}

int64_t Rows(const Tensor& t, int64_t cols) { return cols == 0 ? 0 : t.num_elements() / cols; }

absl::Status BiasActivationKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& x = c.input(0);
  int64_t cols = x.shape().back();
  CUDA_CHECK(LaunchBiasActivation(Stream(c), ParseActivation(c.node), x.data(), c.input(1).data(),
                                  c.output(0).data(), Rows(x, cols), cols));
  return absl::OkStatus();
}

absl::Status BiasAddKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& x = c.input(0);
  int64_t cols = x.shape().back();
  CUDA_CHECK(LaunchBiasActivation(Stream(c), Activation::kLinear, x.data(), c.input(1).data(),
                                  c.output(0).data(), Rows(x, cols), cols));
  return absl::OkStatus();
}

absl::Status BiasAddGradKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& dy = c.input(0);
  int64_t cols = dy.shape().back();
  CUDA_CHECK(LaunchBiasActivationGrad(Stream(c), Activation::kLinear, dy.data(), nullptr, nullptr,
                                      c.output(0).data(), Rows(dy, cols), cols));
  return absl::OkStatus();
}

absl::Status BiasActivationGradKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& dy = c.input(0);
  int64_t cols = dy.shape().back();
  CUDA_CHECK(LaunchBiasActivationGrad(Stream(c), ParseActivation(c.node), dy.data(),
                                      c.input(1).data(), c.output(0).data(), c.output(1).data(),
                                      Rows(dy, cols), cols));
  return absl::OkStatus();
}

absl::Status Binary(KernelContext& c, BinaryOp op) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  int64_t n = c.output(0).num_elements();
  int64_t a_step = 1, b_step = 1;
  if (a.num_elements() != n || b.num_elements() != n) {
    // The shape function allows one operand with exactly one element.
    if (b.num_elements() == 1) {
      b_step = 0;
    } else {
      a_step = 0;
    }
  }
  CUDA_CHECK(
      LaunchBinary(Stream(c), op, a.data(), a_step, b.data(), b_step, c.output(0).data(), n));
  return absl::OkStatus();
}

absl::Status AddKernel(KernelContext& c) { return Binary(c, BinaryOp::kAdd); }
absl::Status SubKernel(KernelContext& c) { return Binary(c, BinaryOp::kSub); }
absl::Status MulKernel(KernelContext& c) { return Binary(c, BinaryOp::kMul); }
absl::Status ReluGradKernel(KernelContext& c) { return Binary(c, BinaryOp::kReluGrad); }
absl::Status TanhGradKernel(KernelContext& c) { return Binary(c, BinaryOp::kTanhGrad); }
absl::Status SigmoidGradKernel(KernelContext& c) { return Binary(c, BinaryOp::kSigmoidGrad); }

absl::Status Unary(KernelContext& c, UnaryOp op) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  CUDA_CHECK(LaunchUnary(Stream(c), op, c.input(0).data(), c.output(0).data(),
                         c.output(0).num_elements()));
  return absl::OkStatus();
}

absl::Status NegKernel(KernelContext& c) { return Unary(c, UnaryOp::kNeg); }
absl::Status ReluKernel(KernelContext& c) { return Unary(c, UnaryOp::kRelu); }
absl::Status TanhKernel(KernelContext& c) { return Unary(c, UnaryOp::kTanh); }
absl::Status SigmoidKernel(KernelContext& c) { return Unary(c, UnaryOp::kSigmoid); }

absl::Status SumLikeKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& dy = c.input(0);
  Tensor& out = c.output(0);
  if (dy.num_elements() == out.num_elements()) {
    if (out.num_elements() > 0) {
      CUDA_CHECK(cudaMemcpyAsync(out.data(), dy.data(),
                                 sizeof(float) * static_cast<size_t>(out.num_elements()),
                                 cudaMemcpyDeviceToDevice, Stream(c)));
    }
    return absl::OkStatus();
  }
  CUDA_CHECK(LaunchSumAll(Stream(c), dy.data(), out.data(), dy.num_elements(), 1.0f));
  return absl::OkStatus();
}

// Reports a bad label found by the device-side check, with its value.
absl::Status CheckLabels(KernelContext& c, const float* labels, int64_t classes) {
  absl::StatusOr<CudaDevice::ErrorRecord> record = Dev(c).ReadErrorRecord();
  if (!record.ok()) return record.status();
  if (record->row == INT32_MAX) return absl::OkStatus();
  float value = 0;
  CUDA_CHECK(cudaMemcpy(&value, labels + record->row, sizeof(float), cudaMemcpyDeviceToHost));
  return KernelError(c, absl::StrCat("label ", value, " of example ", record->row,
                                     " is not a class in [0, ", classes, ")"));
}

absl::Status SoftmaxCrossEntropyKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& logits = c.input(0);
  int64_t n = logits.dim(0), k = logits.dim(1);
  if (n > INT32_MAX) return KernelError(c, "batch exceeds 2^31 rows");
  absl::StatusOr<float*> row_loss = Dev(c).Scratch(static_cast<size_t>(n));
  if (!row_loss.ok()) return row_loss.status();
  if (absl::Status s = Dev(c).ResetErrorRecord(); !s.ok()) return s;
  CUDA_CHECK(LaunchSoftmaxCrossEntropy(Stream(c), logits.data(), c.input(1).data(), n, k,
                                       c.output(0).data(), c.output(1).data(), *row_loss,
                                       Dev(c).device_error_record()));
  return CheckLabels(c, c.input(1).data(), k);
}

absl::Status SoftmaxKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& logits = c.input(0);
  CUDA_CHECK(
      LaunchSoftmax(Stream(c), logits.data(), c.output(0).data(), logits.dim(0), logits.dim(1)));
  return absl::OkStatus();
}

absl::Status AccuracyKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& logits = c.input(0);
  int64_t n = logits.dim(0), k = logits.dim(1);
  if (n > INT32_MAX) return KernelError(c, "batch exceeds 2^31 rows");
  absl::StatusOr<float*> rows = Dev(c).Scratch(static_cast<size_t>(n));
  if (!rows.ok()) return rows.status();
  if (absl::Status s = Dev(c).ResetErrorRecord(); !s.ok()) return s;
  CUDA_CHECK(LaunchAccuracy(Stream(c), logits.data(), c.input(1).data(), n, k, c.output(0).data(),
                            *rows, Dev(c).device_error_record()));
  return CheckLabels(c, c.input(1).data(), k);
}

// Strides of the reduced tensor seen from the input's axes (0 on reduced
// axes), as the CPU kernel's ReducedStrides.
std::vector<int64_t> OutStrides(const engine::Shape& shape, const engine::IntList& axes) {
  std::vector<bool> reduced(shape.size(), axes.empty());
  for (int64_t a : axes)
    reduced[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(shape.size()) : a)] = true;
  std::vector<int64_t> strides(shape.size(), 0);
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (!reduced[i]) {
      strides[i] = s;
      s *= shape[i];
    }
  }
  return strides;
}

absl::Status ReduceKernel(KernelContext& c, bool mean) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& x = c.input(0);
  Tensor& out = c.output(0);
  if (x.rank() > kMaxRank)
    return KernelError(c, absl::StrCat("rank ", x.rank(), " exceeds ", kMaxRank));
  std::vector<int64_t> out_strides = OutStrides(x.shape(), c.node.GetInts("axes"));
  std::vector<int64_t> in_strides = engine::RowMajorStrides(x.shape());
  ReduceGeometry g;
  for (int d = 0; d < x.rank(); ++d) {
    // Kept axes always have a non-zero output stride.
    bool reduced = out_strides[static_cast<size_t>(d)] == 0;
    if (reduced) {
      g.reduced_dims[g.reduced_rank] = x.dim(d);
      g.reduced_strides[g.reduced_rank++] = in_strides[static_cast<size_t>(d)];
      g.reduced_count *= x.dim(d);
    } else {
      g.kept_dims[g.kept_rank] = x.dim(d);
      g.kept_strides[g.kept_rank++] = in_strides[static_cast<size_t>(d)];
    }
  }
  g.out_count = out.num_elements();
  if (x.num_elements() == 0) {
    CUDA_CHECK(LaunchFill(Stream(c), out.data(), out.num_elements(), 0.0f));
    return absl::OkStatus();
  }
  float scale = 1.0f;
  if (mean && out.num_elements() > 0) {
    scale = static_cast<float>(static_cast<double>(out.num_elements()) /
                               static_cast<double>(x.num_elements()));
  }
  CUDA_CHECK(LaunchReduce(Stream(c), g, x.data(), out.data(), scale));
  return absl::OkStatus();
}
absl::Status SumKernel(KernelContext& c) { return ReduceKernel(c, false); }
absl::Status MeanKernel(KernelContext& c) { return ReduceKernel(c, true); }

absl::Status ReduceGradKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& dy = c.input(0);
  const Tensor& x = c.input(1);
  if (x.rank() > kMaxRank)
    return KernelError(c, absl::StrCat("rank ", x.rank(), " exceeds ", kMaxRank));
  float scale = 1.0f;
  if (c.node.GetBool("mean") && x.num_elements() > 0) {
    scale = static_cast<float>(dy.num_elements()) / static_cast<float>(x.num_elements());
  }
  std::vector<int64_t> out_strides = OutStrides(x.shape(), c.node.GetInts("axes"));
  CUDA_CHECK(LaunchReduceGrad(Stream(c), x.rank(), x.shape().data(), out_strides.data(), dy.data(),
                              c.output(0).data(), x.num_elements(), scale));
  return absl::OkStatus();
}

absl::Status DropoutKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& x = c.input(0);
  float* y = c.output(0).data();
  float* mask = c.output(1).data();
  int64_t n = x.num_elements();
  double rate = c.node.GetFloat("rate");
  if (!c.run.training || rate == 0.0) {
    if (n > 0) {
      CUDA_CHECK(cudaMemcpyAsync(y, x.data(), sizeof(float) * static_cast<size_t>(n),
                                 cudaMemcpyDeviceToDevice, Stream(c)));
    }
    CUDA_CHECK(LaunchFill(Stream(c), mask, n, 1.0f));
    return absl::OkStatus();
  }
  // The CPU kernel's stream: it depends on (seed, step, node name) only, so
  // a replica on either device drops the same units.
  uint64_t state = c.run.seed ^ (static_cast<uint64_t>(c.run.step) * 0xD1B54A32D192ED03ull) ^
                   std::hash<std::string>()(c.node.name);
  float keep_scale = static_cast<float>(1.0 / (1.0 - rate));
  uint64_t threshold = static_cast<uint64_t>(rate * 4294967296.0);
  CUDA_CHECK(LaunchDropout(Stream(c), x.data(), y, mask, n, state, threshold, keep_scale));
  return absl::OkStatus();
}

absl::StatusOr<ConvGeometry> GetConvGeometry(const KernelContext& c, const engine::Shape& x,
                                             int64_t kh, int64_t kw, int64_t out_c) {
  ConvGeometry g{};
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3], g.kh = kh, g.kw = kw, g.out_c = out_c;
  g.stride = c.node.GetInt("stride", 1);
  std::string padding = c.node.GetString("padding", "SAME");
  auto gh = engine::ComputeWindow(g.h, kh, g.stride, padding);
  auto gw = engine::ComputeWindow(g.w, kw, g.stride, padding);
  if (!gh.ok()) return KernelError(c, gh.status().message());
  if (!gw.ok()) return KernelError(c, gw.status().message());
  g.oh = gh->out, g.ow = gw->out, g.pad_h = gh->pad_before, g.pad_w = gw->pad_before;
  return g;
}

absl::StatusOr<float*> Columns(KernelContext& c, const ConvGeometry& g) {
  return Dev(c).Scratch(static_cast<size_t>(g.rows() * g.patch()));
}

absl::Status Conv2DKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& x = c.input(0);
  const Tensor& f = c.input(1);
  auto g = GetConvGeometry(c, x.shape(), f.dim(0), f.dim(1), f.dim(3));
  if (!g.ok()) return g.status();
  if (g->rows() == 0) return absl::OkStatus();
  absl::StatusOr<float*> cols = Columns(c, *g);
  if (!cols.ok()) return cols.status();
  CUDA_CHECK(LaunchIm2Col(Stream(c), *g, x.data(), *cols));
  return Gemm(c, false, false, g->rows(), g->out_c, g->patch(), *cols, f.data(),
              c.output(0).data());
}

absl::Status Conv2DBackpropInputKernel(KernelContext& c) {
  // (dy, filter, input)
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& dy = c.input(0);
  const Tensor& f = c.input(1);
  auto g = GetConvGeometry(c, c.input(2).shape(), f.dim(0), f.dim(1), f.dim(3));
  if (!g.ok()) return g.status();
  if (g->rows() == 0) return absl::OkStatus();
  absl::StatusOr<float*> cols = Columns(c, *g);
  if (!cols.ok()) return cols.status();
  if (absl::Status s =
          Gemm(c, false, true, g->rows(), g->patch(), g->out_c, dy.data(), f.data(), *cols);
      !s.ok()) {
    return s;
  }
  CUDA_CHECK(LaunchCol2Im(Stream(c), *g, *cols, c.output(0).data()));
  return absl::OkStatus();
}

absl::Status Conv2DBackpropFilterKernel(KernelContext& c) {
  // (input, dy, filter)
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  const Tensor& x = c.input(0);
  const Tensor& dy = c.input(1);
  const Tensor& f = c.input(2);
  auto g = GetConvGeometry(c, x.shape(), f.dim(0), f.dim(1), f.dim(3));
  if (!g.ok()) return g.status();
  if (g->rows() == 0) {
    CUDA_CHECK(LaunchFill(Stream(c), c.output(0).data(), c.output(0).num_elements(), 0.0f));
    return absl::OkStatus();
  }
  absl::StatusOr<float*> cols = Columns(c, *g);
  if (!cols.ok()) return cols.status();
  CUDA_CHECK(LaunchIm2Col(Stream(c), *g, x.data(), *cols));
  return Gemm(c, true, false, g->patch(), g->out_c, g->rows(), *cols, dy.data(),
              c.output(0).data());
}

absl::StatusOr<PoolGeometry> GetPoolGeometry(const KernelContext& c, const engine::Shape& x) {
  PoolGeometry g{};
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.k = c.node.GetInt("ksize", 2);
  g.stride = c.node.GetInt("stride", 2);
  std::string padding = c.node.GetString("padding", "VALID");
  auto gh = engine::ComputeWindow(g.h, g.k, g.stride, padding);
  auto gw = engine::ComputeWindow(g.w, g.k, g.stride, padding);
  if (!gh.ok()) return KernelError(c, gh.status().message());
  if (!gw.ok()) return KernelError(c, gw.status().message());
  g.oh = gh->out, g.ow = gw->out, g.pad_h = gh->pad_before, g.pad_w = gw->pad_before;
  return g;
}

absl::Status MaxPoolKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  auto g = GetPoolGeometry(c, c.input(0).shape());
  if (!g.ok()) return g.status();
  CUDA_CHECK(LaunchMaxPool(Stream(c), *g, c.input(0).data(), c.output(0).data()));
  return absl::OkStatus();
}

absl::Status MaxPoolGradKernel(KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  auto g = GetPoolGeometry(c, c.input(0).shape());
  if (!g.ok()) return g.status();
  CUDA_CHECK(
      LaunchMaxPoolGrad(Stream(c), *g, c.input(0).data(), c.input(1).data(), c.output(0).data()));
  return absl::OkStatus();
}

// ---- Optimizer updates, in place: output 0 the variable, further outputs
// the slots, input 0 the gradient (the engine's convention).

absl::Status CheckUpdate(const KernelContext& c) {
  if (absl::Status s = CheckPlacement(c); !s.ok()) return s;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    if (c.outputs[i].num_elements() > 0 &&
        c.outputs[i].device_type() != engine::DeviceType::kCuda) {
      return KernelError(c, absl::StrCat("updated tensor ", i, " is in host memory"));
    }
  }
  return absl::OkStatus();
}

float Attr(const KernelContext& c, absl::string_view key) {
  return static_cast<float>(c.node.GetFloat(key));
}

absl::Status ApplyGradientDescentKernel(KernelContext& c) {
  if (absl::Status s = CheckUpdate(c); !s.ok()) return s;
  CUDA_CHECK(LaunchSgdUpdate(Stream(c), c.input(0).data(), c.output(0).data(),
                             c.output(0).num_elements(), Attr(c, "learning_rate")));
  return absl::OkStatus();
}

absl::Status ApplyMomentumKernel(KernelContext& c) {
  if (absl::Status s = CheckUpdate(c); !s.ok()) return s;
  CUDA_CHECK(LaunchMomentumUpdate(Stream(c), c.input(0).data(), c.output(0).data(),
                                  c.output(1).data(), c.output(0).num_elements(),
                                  Attr(c, "learning_rate"), Attr(c, "momentum"),
                                  c.node.GetBool("nesterov")));
  return absl::OkStatus();
}

absl::Status ApplyAdagradKernel(KernelContext& c) {
  if (absl::Status s = CheckUpdate(c); !s.ok()) return s;
  CUDA_CHECK(LaunchAdagradUpdate(Stream(c), c.input(0).data(), c.output(0).data(),
                                 c.output(1).data(), c.output(0).num_elements(),
                                 Attr(c, "learning_rate"), Attr(c, "epsilon")));
  return absl::OkStatus();
}

absl::Status ApplyAdamKernel(KernelContext& c) {
  if (absl::Status s = CheckUpdate(c); !s.ok()) return s;
  CUDA_CHECK(LaunchAdamUpdate(Stream(c), c.input(0).data(), c.output(0).data(), c.output(1).data(),
                              c.output(2).data(), c.output(0).num_elements(), Attr(c, "lr_t"),
                              Attr(c, "beta1"), Attr(c, "beta2"), Attr(c, "epsilon_hat")));
  return absl::OkStatus();
}

}  // namespace

const std::map<std::string, engine::Kernel, std::less<>>& CudaKernelTable() {
  static const auto* table = new std::map<std::string, engine::Kernel, std::less<>>{
      KUBETRAIN_KERNEL_OPS(KUBETRAIN_KERNEL_ENTRY) KUBETRAIN_UPDATE_OPS(KUBETRAIN_KERNEL_ENTRY)};
  return *table;
}

}  // namespace kubetrain::runtime::cuda
