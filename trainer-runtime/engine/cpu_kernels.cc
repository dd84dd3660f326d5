// CPU kernels. Dense algebra goes to OpenBLAS (sgemm with the transposes
// folded into the call, never materialised); everything else is a plain
// loop over contiguous rows that the compiler vectorises. Kernels start no
// threads of their own: the BLAS thread pool is the device's only pool.
#include "trainer-runtime/engine/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/op_list.h"
#include "trainer-runtime/engine/op_registry.h"

namespace kubetrain::runtime::engine {

absl::Status KernelError(const KernelContext& c, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", c.node.name, "' (", c.node.op, "): ", what));
}

// ---- Loops shared with the oneDNN kernels (cpu_kernels.h).

Activation ParseActivation(const Node& node) {
  std::string a = node.GetString("activation", "linear");
  if (a == "relu") return Activation::kRelu;
  if (a == "tanh") return Activation::kTanh;
  if (a == "sigmoid") return Activation::kSigmoid;
  return Activation::kLinear;
}

// y = act(x + b) row by row; one pass over x, so the pre-activation never
// goes back to memory.
template <Activation kAct>
void BiasActivationRowsOf(const float* __restrict x, const float* __restrict b, float* __restrict y,
                          int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      float z = xr[j] + b[j];
      if constexpr (kAct == Activation::kRelu) z = z > 0.0f ? z : 0.0f;
      if constexpr (kAct == Activation::kTanh) z = std::tanh(z);
      if constexpr (kAct == Activation::kSigmoid) z = 1.0f / (1.0f + std::exp(-z));
      yr[j] = z;
    }
  }
}

void BiasActivationRows(Activation act, const float* x, const float* b, float* y, int64_t rows,
                        int64_t cols) {
  switch (act) {
    case Activation::kLinear:
      return BiasActivationRowsOf<Activation::kLinear>(x, b, y, rows, cols);
    case Activation::kRelu:
      return BiasActivationRowsOf<Activation::kRelu>(x, b, y, rows, cols);
    case Activation::kTanh:
      return BiasActivationRowsOf<Activation::kTanh>(x, b, y, rows, cols);
    case Activation::kSigmoid:
      return BiasActivationRowsOf<Activation::kSigmoid>(x, b, y, rows, cols);
  }
}

// dz = dy * act'(y) and db = column sums of dz, in one pass.
template <Activation kAct>
void BiasActivationGradRowsOf(const float* __restrict dy, const float* __restrict y,
                              float* __restrict dz, float* __restrict db, int64_t rows,
                              int64_t cols) {
  std::fill_n(db, cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* yr = y + r * cols;
    float* dzr = dz + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      float g = dyr[j];
      if constexpr (kAct == Activation::kRelu) g = yr[j] > 0.0f ? g : 0.0f;
      if constexpr (kAct == Activation::kTanh) g *= 1.0f - yr[j] * yr[j];
      if constexpr (kAct == Activation::kSigmoid) g *= yr[j] * (1.0f - yr[j]);
      dzr[j] = g;
      db[j] += g;
    }
  }
}

void BiasActivationGradRows(Activation act, const float* dy, const float* y, float* dz, float* db,
                            int64_t rows, int64_t cols) {
  switch (act) {
    case Activation::kLinear:
      return BiasActivationGradRowsOf<Activation::kLinear>(dy, y, dz, db, rows, cols);
    case Activation::kRelu:
      return BiasActivationGradRowsOf<Activation::kRelu>(dy, y, dz, db, rows, cols);
    case Activation::kTanh:
      return BiasActivationGradRowsOf<Activation::kTanh>(dy, y, dz, db, rows, cols);
    case Activation::kSigmoid:
      return BiasActivationGradRowsOf<Activation::kSigmoid>(dy, y, dz, db, rows, cols);
  }
}

absl::StatusOr<ConvGeometry> GetConvGeometry(const KernelContext& c, const Shape& x, int64_t kh,
                                             int64_t kw, int64_t out_c) {
  ConvGeometry g{};
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3], g.kh = kh, g.kw = kw, g.out_c = out_c;
  g.stride = c.node.GetInt("stride", 1);
  std::string padding = c.node.GetString("padding", "SAME");
  auto gh = ComputeWindow(g.h, kh, g.stride, padding);
  auto gw = ComputeWindow(g.w, kw, g.stride, padding);
  if (!gh.ok()) return KernelError(c, gh.status().message());
  if (!gw.ok()) return KernelError(c, gw.status().message());
  g.oh = gh->out, g.ow = gw->out, g.pad_h = gh->pad_before, g.pad_w = gw->pad_before;
  return g;
}

absl::StatusOr<PoolGeometry> GetPoolGeometry(const KernelContext& c, const Shape& x) {
  return GetPoolGeometry(c, c.node, x);
}

absl::StatusOr<PoolGeometry> GetPoolGeometry(const KernelContext& c, const Node& pool,
                                             const Shape& x) {
  PoolGeometry g{};
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.k = pool.GetInt("ksize", 2);
  g.stride = pool.GetInt("stride", 2);
  std::string padding = pool.GetString("padding", "VALID");
  auto gh = ComputeWindow(g.h, g.k, g.stride, padding);
  auto gw = ComputeWindow(g.w, g.k, g.stride, padding);
  if (!gh.ok()) return KernelError(c, gh.status().message());
  if (!gw.ok()) return KernelError(c, gw.status().message());
  g.oh = gh->out, g.ow = gw->out, g.pad_h = gh->pad_before, g.pad_w = gw->pad_before;
  return g;
}

void MaxPoolForward(const PoolGeometry& g, const float* __restrict px, float* __restrict y) {
  // Values only (no arg-max bookkeeping): the first valid pixel of the
  // window initialises the row, the rest are maxed in, channels innermost.
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        float* __restrict out = y + ((b * g.oh + oy) * g.ow + ox) * g.c;
        bool first = true;
        for (int64_t ky = 0; ky < g.k; ++ky) {
          int64_t iy = oy * g.stride + ky - g.pad_h;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.k; ++kx) {
            int64_t ix = ox * g.stride + kx - g.pad_w;
            if (ix < 0 || ix >= g.w) continue;
            const float* __restrict in = px + ((b * g.h + iy) * g.w + ix) * g.c;
            if (first) {
              std::memcpy(out, in, sizeof(float) * static_cast<size_t>(g.c));
              first = false;
            } else {
              for (int64_t ci = 0; ci < g.c; ++ci) out[ci] = in[ci] > out[ci] ? in[ci] : out[ci];
            }
          }
        }
        if (first) std::fill_n(out, g.c, 0.0f);
      }
    }
  }
}

// Routes each pooled gradient to the first maximum of its window (the same
// element the forward pass picked): one vectorised pass finds the maxima,
// a second finds, per channel, the first pixel holding it.
void MaxPoolBackward(const PoolGeometry& g, const float* __restrict px, const float* __restrict dy,
                     float* __restrict dx) {
  std::fill_n(dx, g.n * g.h * g.w * g.c, 0.0f);
  std::vector<float> best(static_cast<size_t>(g.c));
  std::vector<char> done(static_cast<size_t>(g.c));
  std::vector<int64_t> window;
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        window.clear();
        for (int64_t ky = 0; ky < g.k; ++ky) {
          int64_t iy = oy * g.stride + ky - g.pad_h;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.k; ++kx) {
            int64_t ix = ox * g.stride + kx - g.pad_w;
            if (ix >= 0 && ix < g.w) window.push_back(((b * g.h + iy) * g.w + ix) * g.c);
          }
        }
        if (window.empty()) continue;
        float* __restrict bv = best.data();
        std::memcpy(bv, px + window[0], sizeof(float) * static_cast<size_t>(g.c));
        for (size_t w = 1; w < window.size(); ++w) {
          const float* __restrict in = px + window[w];
          for (int64_t ci = 0; ci < g.c; ++ci) bv[ci] = in[ci] > bv[ci] ? in[ci] : bv[ci];
        }
        const float* __restrict grad = dy + ((b * g.oh + oy) * g.ow + ox) * g.c;
        char* __restrict dn = done.data();
        std::fill_n(dn, g.c, 0);
        for (int64_t base : window) {
          const float* __restrict in = px + base;
          float* __restrict out = dx + base;
          for (int64_t ci = 0; ci < g.c; ++ci) {
            bool hit = !dn[ci] && in[ci] == bv[ci];
            out[ci] += hit ? grad[ci] : 0.0f;
            dn[ci] |= hit;
          }
        }
      }
    }
  }
}

namespace {

// Scratch memory reused across calls (im2col columns), so a training step
// allocates nothing once shapes are stable. One per thread: kernels may run
// on several executors' threads.
float* Scratch(size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}

void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
          float* c, float beta = 0.0f) {
  // Row-major leading dimensions of the operands as stored.
  int64_t lda = ta ? m : k;
  int64_t ldb = tb ? k : n;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(n));
}

absl::Status ConstKernel(KernelContext& c) {
  float v = static_cast<float>(c.node.GetFloat("value"));
  std::fill_n(c.output(0).data(), c.output(0).num_elements(), v);
  return absl::OkStatus();
}

absl::Status ZerosLikeKernel(KernelContext& c) {
  std::fill_n(c.output(0).data(), c.output(0).num_elements(), 0.0f);
  return absl::OkStatus();
}

absl::Status MatMulKernel(KernelContext& c) {
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  bool ta = c.node.GetBool("transpose_a"), tb = c.node.GetBool("transpose_b");
  int64_t m = c.output(0).dim(0), n = c.output(0).dim(1);
  int64_t k = ta ? a.dim(0) : a.dim(1);
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    std::fill_n(c.output(0).data(), m * n, 0.0f);
    return absl::OkStatus();
  }
  Gemm(ta, tb, m, n, k, a.data(), b.data(), c.output(0).data());
  return absl::OkStatus();
}

absl::Status BiasActivationKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  int64_t cols = x.shape().back();
  int64_t rows = cols == 0 ? 0 : x.num_elements() / cols;
  BiasActivationRows(ParseActivation(c.node), x.data(), c.input(1).data(), c.output(0).data(), rows,
                     cols);
  return absl::OkStatus();
}

void ColumnSums(const float* __restrict x, float* __restrict out, int64_t rows, int64_t cols) {
  std::fill_n(out, cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] += xr[j];
  }
}

absl::Status BiasAddGradKernel(KernelContext& c) {
  const Tensor& dy = c.input(0);
  int64_t cols = dy.shape().back();
  ColumnSums(dy.data(), c.output(0).data(), cols == 0 ? 0 : dy.num_elements() / cols, cols);
  return absl::OkStatus();
}

absl::Status BiasActivationGradKernel(KernelContext& c) {
  const Tensor& dy = c.input(0);
  int64_t cols = dy.shape().back();
  int64_t rows = cols == 0 ? 0 : dy.num_elements() / cols;
  BiasActivationGradRows(ParseActivation(c.node), dy.data(), c.input(1).data(), c.output(0).data(),
                         c.output(1).data(), rows, cols);
  return absl::OkStatus();
}

absl::Status BiasAddKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  int64_t cols = x.shape().back();
  BiasActivationRows(Activation::kLinear, x.data(), c.input(1).data(), c.output(0).data(),
                     cols == 0 ? 0 : x.num_elements() / cols, cols);
  return absl::OkStatus();
}

template <typename F>
absl::Status Binary(KernelContext& c, F f) {
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  float* out = c.output(0).data();
  int64_t n = c.output(0).num_elements();
  const float* pa = a.data();
  const float* pb = b.data();
  if (a.num_elements() == n && b.num_elements() == n) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(pa[i], pb[i]);
  } else if (b.num_elements() == 1) {
    float vb = pb[0];
    for (int64_t i = 0; i < n; ++i) out[i] = f(pa[i], vb);
  } else {
    float va = pa[0];
    for (int64_t i = 0; i < n; ++i) out[i] = f(va, pb[i]);
  }
  return absl::OkStatus();
}

absl::Status AddKernel(KernelContext& c) {
  return Binary(c, [](float a, float b) { return a + b; });
}
absl::Status SubKernel(KernelContext& c) {
  return Binary(c, [](float a, float b) { return a - b; });
}
absl::Status MulKernel(KernelContext& c) {
  return Binary(c, [](float a, float b) { return a * b; });
}

template <typename F>
absl::Status Unary(KernelContext& c, F f) {
  const float* x = c.input(0).data();
  float* y = c.output(0).data();
  int64_t n = c.output(0).num_elements();
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  return absl::OkStatus();
}

absl::Status NegKernel(KernelContext& c) {
  return Unary(c, [](float x) { return -x; });
}
absl::Status ReluKernel(KernelContext& c) {
  return Unary(c, [](float x) { return x > 0.0f ? x : 0.0f; });
}
absl::Status TanhKernel(KernelContext& c) {
  return Unary(c, [](float x) { return std::tanh(x); });
}
absl::Status SigmoidKernel(KernelContext& c) {
  return Unary(c, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
}

// Inputs (dy, y): the gradient in terms of the op's own output.
absl::Status ReluGradKernel(KernelContext& c) {
  return Binary(c, [](float dy, float y) { return y > 0.0f ? dy : 0.0f; });
}
absl::Status TanhGradKernel(KernelContext& c) {
  return Binary(c, [](float dy, float y) { return dy * (1.0f - y * y); });
}
absl::Status SigmoidGradKernel(KernelContext& c) {
  return Binary(c, [](float dy, float y) { return dy * y * (1.0f - y); });
}

absl::Status SumLikeKernel(KernelContext& c) {
  const Tensor& dy = c.input(0);
  Tensor& out = c.output(0);
  if (dy.num_elements() == out.num_elements()) {
    std::memcpy(out.data(), dy.data(), sizeof(float) * static_cast<size_t>(out.num_elements()));
    return absl::OkStatus();
  }
  double sum = 0;
  const float* p = dy.data();
  for (int64_t i = 0; i < dy.num_elements(); ++i) sum += p[i];
  out.data()[0] = static_cast<float>(sum);
  return absl::OkStatus();
}

absl::StatusOr<int32_t> Label(const KernelContext& c, float value, int64_t row, int64_t classes) {
  if (!(value >= 0.0f && value < static_cast<float>(classes)) || value != std::floor(value)) {
    return KernelError(c, absl::StrCat("label ", value, " of example ", row,
                                       " is not a class in [0, ", classes, ")"));
  }
  return static_cast<int32_t>(value);
}

absl::Status SoftmaxCrossEntropyKernel(KernelContext& c) {
  const Tensor& logits = c.input(0);
  const float* labels = c.input(1).data();
  int64_t n = logits.dim(0), k = logits.dim(1);
  float* backprop = c.output(1).data();
  double total = 0;
  float inv_n = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    absl::StatusOr<int32_t> label = Label(c, labels[r], r, k);
    if (!label.ok()) return label.status();
    const float* z = logits.data() + r * k;
    float* g = backprop + r * k;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < k; ++j) max = std::max(max, z[j]);
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      g[j] = std::exp(z[j] - max);
      sum += g[j];
    }
    float log_sum = std::log(sum);
    total += static_cast<double>(log_sum - (z[*label] - max));
    float inv_sum = 1.0f / sum;
    for (int64_t j = 0; j < k; ++j) g[j] *= inv_sum * inv_n;
    g[*label] -= inv_n;
  }
  c.output(0).data()[0] = n > 0 ? static_cast<float>(total / static_cast<double>(n)) : 0.0f;
  return absl::OkStatus();
}

absl::Status SoftmaxKernel(KernelContext& c) {
  const Tensor& logits = c.input(0);
  int64_t n = logits.dim(0), k = logits.dim(1);
  for (int64_t r = 0; r < n; ++r) {
    const float* z = logits.data() + r * k;
    float* p = c.output(0).data() + r * k;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < k; ++j) max = std::max(max, z[j]);
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += (p[j] = std::exp(z[j] - max));
    for (int64_t j = 0; j < k; ++j) p[j] /= sum;
  }
  return absl::OkStatus();
}

absl::Status AccuracyKernel(KernelContext& c) {
  const Tensor& logits = c.input(0);
  const float* labels = c.input(1).data();
  int64_t n = logits.dim(0), k = logits.dim(1);
  int64_t correct = 0;
  for (int64_t r = 0; r < n; ++r) {
    absl::StatusOr<int32_t> label = Label(c, labels[r], r, k);
    if (!label.ok()) return label.status();
    const float* z = logits.data() + r * k;
    int64_t best = std::max_element(z, z + k) - z;
    correct += best == *label ? 1 : 0;
  }
  c.output(0).data()[0] = n > 0 ? static_cast<float>(correct) / static_cast<float>(n) : 0.0f;
  return absl::OkStatus();
}

// Maps each element of `shape` to its position in the reduced tensor: the
// row-major strides of the kept axes, zero for reduced axes.
std::vector<int64_t> ReducedStrides(const Shape& shape, const IntList& axes) {
  std::vector<bool> reduced(shape.size(), axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + static_cast<int64_t>(shape.size()) : a] = true;
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

// Calls f(input_index, output_index) for every element of `shape`.
template <typename F>
void ForEachReduced(const Shape& shape, const std::vector<int64_t>& out_strides, F f) {
  int64_t n = NumElements(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t out = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, out);
    for (size_t d = shape.size(); d-- > 0;) {
      ++idx[d];
      out += out_strides[d];
      if (idx[d] < shape[d]) break;
      out -= out_strides[d] * idx[d];
      idx[d] = 0;
    }
  }
}

absl::Status ReduceKernel(KernelContext& c, bool mean) {
  const Tensor& x = c.input(0);
  Tensor& out = c.output(0);
  std::vector<double> acc(static_cast<size_t>(out.num_elements()), 0.0);
  const float* px = x.data();
  ForEachReduced(x.shape(), ReducedStrides(x.shape(), c.node.GetInts("axes")),
                 [&](int64_t i, int64_t o) { acc[o] += px[i]; });
  double scale = 1.0;
  if (mean && out.num_elements() > 0) {
    scale = static_cast<double>(out.num_elements()) /
            static_cast<double>(std::max<int64_t>(x.num_elements(), 1));
  }
  for (int64_t i = 0; i < out.num_elements(); ++i)
    out.data()[i] = static_cast<float>(acc[i] * scale);
  return absl::OkStatus();
}
absl::Status SumKernel(KernelContext& c) { return ReduceKernel(c, false); }
absl::Status MeanKernel(KernelContext& c) { return ReduceKernel(c, true); }

absl::Status ReduceGradKernel(KernelContext& c) {
  const Tensor& dy = c.input(0);
  const Tensor& x = c.input(1);
  float scale = 1.0f;
  if (c.node.GetBool("mean") && x.num_elements() > 0) {
    scale = static_cast<float>(dy.num_elements()) / static_cast<float>(x.num_elements());
  }
  const float* pdy = dy.data();
  float* pdx = c.output(0).data();
  ForEachReduced(x.shape(), ReducedStrides(x.shape(), c.node.GetInts("axes")),
                 [&](int64_t i, int64_t o) { pdx[i] = pdy[o] * scale; });
  return absl::OkStatus();
}

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

absl::Status DropoutKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  float* y = c.output(0).data();
  float* mask = c.output(1).data();
  int64_t n = x.num_elements();
  double rate = c.node.GetFloat("rate");
  if (!c.run.training || rate == 0.0) {
    std::memcpy(y, x.data(), sizeof(float) * static_cast<size_t>(n));
    std::fill_n(mask, n, 1.0f);
    return absl::OkStatus();
  }
  // The stream depends on (seed, step, node name) only.
  uint64_t state = c.run.seed ^ (static_cast<uint64_t>(c.run.step) * 0xD1B54A32D192ED03ull) ^
                   std::hash<std::string>()(c.node.name);
  float keep_scale = static_cast<float>(1.0 / (1.0 - rate));
  uint64_t threshold = static_cast<uint64_t>(rate * 4294967296.0);
  const float* px = x.data();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = SplitMix64(state) >> 32;
    mask[i] = r < threshold ? 0.0f : keep_scale;
    y[i] = px[i] * mask[i];
  }
  return absl::OkStatus();
}

// cols[(n,oy,ox), (ky,kx,ci)] = x[n, oy*s+ky-pad, ox*s+kx-pad, ci] (0 outside).
void Im2Col(const ConvGeometry& g, const float* __restrict x, float* __restrict cols) {
  // Called per layer per step; the loops below are the whole cost.
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        float* row = cols + ((b * g.oh + oy) * g.ow + ox) * g.patch();
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          int64_t iy = oy * g.stride + ky - g.pad_h;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            int64_t ix = ox * g.stride + kx - g.pad_w;
            float* dst = row + (ky * g.kw + kx) * g.c;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
              for (int64_t ci = 0; ci < g.c; ++ci) dst[ci] = 0.0f;
            } else {
              // A plain loop: rows are short (one channel for the first
              // layer), too short for a memcpy call to pay.
              const float* __restrict src = x + ((b * g.h + iy) * g.w + ix) * g.c;
              for (int64_t ci = 0; ci < g.c; ++ci) dst[ci] = src[ci];
            }
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: dx += scatter of dcols.
void Col2Im(const ConvGeometry& g, const float* __restrict cols, float* __restrict dx) {
  std::fill_n(dx, g.n * g.h * g.w * g.c, 0.0f);
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const float* row = cols + ((b * g.oh + oy) * g.ow + ox) * g.patch();
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          int64_t iy = oy * g.stride + ky - g.pad_h;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            int64_t ix = ox * g.stride + kx - g.pad_w;
            if (ix < 0 || ix >= g.w) continue;
            const float* src = row + (ky * g.kw + kx) * g.c;
            float* dst = dx + ((b * g.h + iy) * g.w + ix) * g.c;
            for (int64_t ci = 0; ci < g.c; ++ci) dst[ci] += src[ci];
          }
        }
      }
    }
  }
}

absl::Status Conv2DKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  const Tensor& f = c.input(1);
  auto g = GetConvGeometry(c, x.shape(), f.dim(0), f.dim(1), f.dim(3));
  if (!g.ok()) return g.status();
  if (g->rows() == 0) return absl::OkStatus();
  float* cols = Scratch(static_cast<size_t>(g->rows() * g->patch()));
  Im2Col(*g, x.data(), cols);
  Gemm(false, false, g->rows(), g->out_c, g->patch(), cols, f.data(), c.output(0).data());
  return absl::OkStatus();
}

absl::Status Conv2DBackpropInputKernel(KernelContext& c) {
  // (dy, filter, input)
  const Tensor& dy = c.input(0);
  const Tensor& f = c.input(1);
  auto g = GetConvGeometry(c, c.input(2).shape(), f.dim(0), f.dim(1), f.dim(3));
  if (!g.ok()) return g.status();
  if (g->rows() == 0) return absl::OkStatus();
  float* cols = Scratch(static_cast<size_t>(g->rows() * g->patch()));
  Gemm(false, true, g->rows(), g->patch(), g->out_c, dy.data(), f.data(), cols);
  Col2Im(*g, cols, c.output(0).data());
  return absl::OkStatus();
}

absl::Status Conv2DBackpropFilterKernel(KernelContext& c) {
  // (input, dy, filter)
  const Tensor& x = c.input(0);
  const Tensor& dy = c.input(1);
  const Tensor& f = c.input(2);
  auto g = GetConvGeometry(c, x.shape(), f.dim(0), f.dim(1), f.dim(3));
  if (!g.ok()) return g.status();
  if (g->rows() == 0) {
    std::fill_n(c.output(0).data(), c.output(0).num_elements(), 0.0f);
    return absl::OkStatus();
  }
  float* cols = Scratch(static_cast<size_t>(g->rows() * g->patch()));
  Im2Col(*g, x.data(), cols);
  Gemm(true, false, g->patch(), g->out_c, g->rows(), cols, dy.data(), c.output(0).data());
  return absl::OkStatus();
}

absl::Status MaxPoolKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  auto g = GetPoolGeometry(c, x.shape());
  if (!g.ok()) return g.status();
  MaxPoolForward(*g, x.data(), c.output(0).data());
  return absl::OkStatus();
}

absl::Status MaxPoolGradKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  auto g = GetPoolGeometry(c, x.shape());
  if (!g.ok()) return g.status();
  MaxPoolBackward(*g, x.data(), c.input(1).data(), c.output(0).data());
  return absl::OkStatus();
}

// ---- Optimizer update kernels. Outputs are updated in place: output 0 is
// the variable, further outputs the optimizer's slots; input 0 the gradient.

absl::Status ApplyGradientDescentKernel(KernelContext& c) {
  float lr = static_cast<float>(c.node.GetFloat("learning_rate"));
  const float* g = c.input(0).data();
  float* w = c.output(0).data();
  int64_t n = c.output(0).num_elements();
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
  return absl::OkStatus();
}

absl::Status ApplyMomentumKernel(KernelContext& c) {
  float lr = static_cast<float>(c.node.GetFloat("learning_rate"));
  float mu = static_cast<float>(c.node.GetFloat("momentum"));
  bool nesterov = c.node.GetBool("nesterov");
  const float* g = c.input(0).data();
  float* w = c.output(0).data();
  float* v = c.output(1).data();
  int64_t n = c.output(0).num_elements();
  for (int64_t i = 0; i < n; ++i) {
    v[i] = mu * v[i] + g[i];
    w[i] -= nesterov ? lr * (g[i] + mu * v[i]) : lr * v[i];
  }
  return absl::OkStatus();
}

absl::Status ApplyAdagradKernel(KernelContext& c) {
  float lr = static_cast<float>(c.node.GetFloat("learning_rate"));
  float eps = static_cast<float>(c.node.GetFloat("epsilon"));
  const float* g = c.input(0).data();
  float* w = c.output(0).data();
  float* acc = c.output(1).data();
  int64_t n = c.output(0).num_elements();
  for (int64_t i = 0; i < n; ++i) {
    acc[i] += g[i] * g[i];
    w[i] -= lr * g[i] / (std::sqrt(acc[i]) + eps);
  }
  return absl::OkStatus();
}

absl::Status ApplyAdamKernel(KernelContext& c) {
  // Bias correction folded into the step size, as TensorFlow's ApplyAdam.
  float lr_t = static_cast<float>(c.node.GetFloat("lr_t"));
  float b1 = static_cast<float>(c.node.GetFloat("beta1"));
  float b2 = static_cast<float>(c.node.GetFloat("beta2"));
  float eps = static_cast<float>(c.node.GetFloat("epsilon_hat"));
  const float* g = c.input(0).data();
  float* w = c.output(0).data();
  float* m = c.output(1).data();
  float* v = c.output(2).data();
  int64_t n = c.output(0).num_elements();
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
  }
  return absl::OkStatus();
}

}  // namespace

const std::map<std::string, Kernel, std::less<>>& CpuKernelTable() {
  static const auto* table = new std::map<std::string, Kernel, std::less<>>{
      KUBETRAIN_KERNEL_OPS(KUBETRAIN_KERNEL_ENTRY) KUBETRAIN_UPDATE_OPS(KUBETRAIN_KERNEL_ENTRY)};
  return *table;
}

}  // namespace kubetrain::runtime::engine
