// The CUDA kernels of the runtime's ops, with their launchers (see
// cuda_launch.h). One file on purpose: every .cu file costs a separate
// nvcc pass. Elementwise kernels use grid-stride loops over 64-bit indices;
// row-wise ops (softmax, accuracy) give each row one warp, since rows are
// class scores (short) and warp shuffles need no shared memory.
#include <cuda_runtime.h>

#include <cstdint>

#include "trainer-runtime/cuda/cuda_launch.h"

namespace kubetrain::runtime::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

unsigned Blocks(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  // Grid-stride loops cover the rest; more blocks than this only adds
  // scheduling overhead.
  return static_cast<unsigned>(blocks > 65535 ? 65535 : blocks);
}

#define KT_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

__device__ __forceinline__ float Activate(Activation act, float z) {
  switch (act) {
    case Activation::kRelu:
      return z > 0.0f ? z : 0.0f;
    case Activation::kTanh:
      return tanhf(z);
    case Activation::kSigmoid:
      return 1.0f / (1.0f + expf(-z));
    default:
      return z;
  }
}

// d act / dz expressed in the activation's output y, times dy.
__device__ __forceinline__ float ActivationGrad(Activation act, float dy, float y) {
  switch (act) {
    case Activation::kRelu:
      return y > 0.0f ? dy : 0.0f;
    case Activation::kTanh:
      return dy * (1.0f - y * y);
    case Activation::kSigmoid:
      return dy * y * (1.0f - y);
    default:
      return dy;
  }
}

__global__ void FillKernel(float* y, int64_t n, float value) { KT_GRID_STRIDE(i, n) y[i] = value; }

__global__ void UnaryKernel(UnaryOp op, const float* __restrict__ x, float* __restrict__ y,
                            int64_t n) {
  KT_GRID_STRIDE(i, n) {
    float v = x[i];
    switch (op) {
      case UnaryOp::kNeg:
        v = -v;
        break;
      case UnaryOp::kRelu:
        v = v > 0.0f ? v : 0.0f;
        break;
      case UnaryOp::kTanh:
        v = tanhf(v);
        break;
      case UnaryOp::kSigmoid:
        v = 1.0f / (1.0f + expf(-v));
        break;
    }
    y[i] = v;
  }
}

__global__ void BinaryKernel(BinaryOp op, const float* __restrict__ a, int64_t a_step,
                             const float* __restrict__ b, int64_t b_step, float* __restrict__ y,
                             int64_t n) {
  KT_GRID_STRIDE(i, n) {
    float va = a[i * a_step], vb = b[i * b_step];
    float v;
    switch (op) {
      case BinaryOp::kAdd:
        v = va + vb;
        break;
      case BinaryOp::kSub:
        v = va - vb;
        break;
      case BinaryOp::kMul:
        v = va * vb;
        break;
      case BinaryOp::kReluGrad:
        v = ActivationGrad(Activation::kRelu, va, vb);
        break;
      case BinaryOp::kTanhGrad:
        v = ActivationGrad(Activation::kTanh, va, vb);
        break;
      default:
        v = ActivationGrad(Activation::kSigmoid, va, vb);
        break;
    }
    y[i] = v;
  }
}

__global__ void BiasActivationKernel(Activation act, const float* __restrict__ x,
                                     const float* __restrict__ bias, float* __restrict__ y,
                                     int64_t rows, int64_t cols) {
  int64_t n = rows * cols;
  KT_GRID_STRIDE(i, n) y[i] = Activate(act, x[i] + bias[i % cols]);
}

// Block (32, 8): 32 adjacent columns (coalesced), 8 row lanes; blockIdx.y
// splits the rows when there are many (convolution outputs), the partial
// column sums then meet in db with atomics.
__global__ void BiasActivationGradKernel(Activation act, const float* __restrict__ dy,
                                         const float* __restrict__ y, float* __restrict__ dz,
                                         float* __restrict__ db, int64_t rows, int64_t cols,
                                         int64_t rows_per_block, bool atomic) {
  __shared__ float partial[8][33];
  int64_t col = blockIdx.x * 32 + threadIdx.x;
  int64_t row_begin = blockIdx.y * rows_per_block;
  int64_t row_end = row_begin + rows_per_block < rows ? row_begin + rows_per_block : rows;
  float acc = 0.0f;
  if (col < cols) {
    for (int64_t r = row_begin + threadIdx.y; r < row_end; r += 8) {
      int64_t i = r * cols + col;
      float g = y == nullptr ? dy[i] : ActivationGrad(act, dy[i], y[i]);
      if (dz != nullptr) dz[i] = g;
      acc += g;
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float sum = 0.0f;
    for (int j = 0; j < 8; ++j) sum += partial[j][threadIdx.x];
    if (atomic) {
      atomicAdd(&db[col], sum);
    } else {
      db[col] = sum;
    }
  }
}

// Block-wide sum in double, result valid in thread 0.
__device__ double BlockSum(double v) {
  __shared__ double shared[kThreads / kWarp];
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_down_sync(0xffffffffu, v, offset);
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    int warps = (blockDim.x + kWarp - 1) / kWarp;
    v = lane < warps ? shared[lane] : 0.0;
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

// One block per output element.
__global__ void ReduceKernel(ReduceGeometry g, const float* __restrict__ x, float* __restrict__ y,
                             float scale) {
  int64_t o = blockIdx.x;
  if (o >= g.out_count) return;
  int64_t base = 0;
  int64_t rest = o;
  for (int d = g.kept_rank - 1; d >= 0; --d) {
    base += (rest % g.kept_dims[d]) * g.kept_strides[d];
    rest /= g.kept_dims[d];
  }
  double acc = 0;
  for (int64_t j = threadIdx.x; j < g.reduced_count; j += blockDim.x) {
    int64_t offset = base;
    int64_t r = j;
    for (int d = g.reduced_rank - 1; d >= 0; --d) {
      offset += (r % g.reduced_dims[d]) * g.reduced_strides[d];
      r /= g.reduced_dims[d];
    }
    acc += x[offset];
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) y[o] = static_cast<float>(acc * scale);
}

struct Dims {
  int64_t v[kMaxRank];
};

__global__ void ReduceGradKernel(int rank, Dims dims, Dims out_strides,
                                 const float* __restrict__ dy, float* __restrict__ dx, int64_t n,
                                 float scale) {
  KT_GRID_STRIDE(i, n) {
    int64_t o = 0, rest = i;
    for (int d = rank - 1; d >= 0; --d) {
      o += (rest % dims.v[d]) * out_strides.v[d];
      rest /= dims.v[d];
    }
    dx[i] = dy[o] * scale;
  }
}

__global__ void SumAllKernel(const float* __restrict__ x, float* __restrict__ y, int64_t n,
                             float scale) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) y[0] = static_cast<float>(acc * scale);
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ bool ValidLabel(float label, int64_t k) {
  return label >= 0.0f && label < static_cast<float>(k) && label == floorf(label);
}

__global__ void SoftmaxCrossEntropyKernel(const float* __restrict__ logits,
                                          const float* __restrict__ labels, int64_t n, int64_t k,
                                          float* __restrict__ backprop,
                                          float* __restrict__ row_loss, KernelErrorRecord* err) {
  int lane = threadIdx.x % kWarp;
  // Warp-stride over rows: one warp per row, the grid is capped.
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; row < n;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp) {
    const float* z = logits + row * k;
    float* g = backprop + row * k;
    float label_value = labels[row];
    if (!ValidLabel(label_value, k)) {
      if (lane == 0) {
        atomicMin(&err->row, static_cast<int32_t>(row));
        row_loss[row] = 0.0f;
      }
      for (int64_t j = lane; j < k; j += kWarp) g[j] = 0.0f;
      continue;
    }
    int64_t label = static_cast<int64_t>(label_value);
    float max = -INFINITY;
    for (int64_t j = lane; j < k; j += kWarp) max = fmaxf(max, z[j]);
    max = WarpMax(max);
    float sum = 0.0f;
    for (int64_t j = lane; j < k; j += kWarp) sum += expf(z[j] - max);
    sum = WarpSum(sum);
    float inv_n = 1.0f / static_cast<float>(n);
    float scale = inv_n / sum;
    for (int64_t j = lane; j < k; j += kWarp) {
      float p = expf(z[j] - max) * scale;
      g[j] = j == label ? p - inv_n : p;
    }
    if (lane == 0) row_loss[row] = logf(sum) - (z[label] - max);
  }
}

__global__ void SoftmaxKernel(const float* __restrict__ logits, float* __restrict__ p, int64_t n,
                              int64_t k) {
  int lane = threadIdx.x % kWarp;
  // Warp-stride over rows: one warp per row, the grid is capped.
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; row < n;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp) {
    const float* z = logits + row * k;
    float max = -INFINITY;
    for (int64_t j = lane; j < k; j += kWarp) max = fmaxf(max, z[j]);
    max = WarpMax(max);
    float sum = 0.0f;
    for (int64_t j = lane; j < k; j += kWarp) sum += expf(z[j] - max);
    sum = WarpSum(sum);
    for (int64_t j = lane; j < k; j += kWarp) p[row * k + j] = expf(z[j] - max) / sum;
  }
}

__global__ void AccuracyRowsKernel(const float* __restrict__ logits,
                                   const float* __restrict__ labels, int64_t n, int64_t k,
                                   float* __restrict__ correct, KernelErrorRecord* err) {
  int lane = threadIdx.x % kWarp;
  // Warp-stride over rows: one warp per row, the grid is capped.
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp; row < n;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp) {
    float label_value = labels[row];
    if (!ValidLabel(label_value, k)) {
      if (lane == 0) {
        atomicMin(&err->row, static_cast<int32_t>(row));
        correct[row] = 0.0f;
      }
      continue;
    }
    const float* z = logits + row * k;
    // The first arg-max, as std::max_element: larger value wins, ties go to
    // the lower index.
    float best = -INFINITY;
    int64_t best_index = k;
    for (int64_t j = lane; j < k; j += kWarp) {
      if (best_index == k || z[j] > best) {
        best = z[j];
        best_index = j;
      }
    }
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      float other = __shfl_xor_sync(0xffffffffu, best, offset);
      int64_t other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
      bool take = other_index != k &&
                  (best_index == k || other > best || (other == best && other_index < best_index));
      if (take) {
        best = other;
        best_index = other_index;
      }
    }
    if (lane == 0) correct[row] = best_index == static_cast<int64_t>(label_value) ? 1.0f : 0.0f;
  }
}

__device__ __forceinline__ uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void DropoutKernel(const float* __restrict__ x, float* __restrict__ y,
                              float* __restrict__ mask, int64_t n, uint64_t state,
                              uint64_t threshold, float keep_scale) {
  KT_GRID_STRIDE(i, n) {
    uint64_t r = Mix64(state + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull) >> 32;
    float m = r < threshold ? 0.0f : keep_scale;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void Im2ColKernel(ConvGeometry g, const float* __restrict__ x,
                             float* __restrict__ cols) {
  int64_t patch = g.patch();
  int64_t n = g.rows() * patch;
  KT_GRID_STRIDE(i, n) {
    int64_t p = i % patch, row = i / patch;
    int64_t ci = p % g.c, kx = (p / g.c) % g.kw, ky = p / (g.c * g.kw);
    int64_t ox = row % g.ow, oy = (row / g.ow) % g.oh, b = row / (g.ow * g.oh);
    int64_t iy = oy * g.stride + ky - g.pad_h, ix = ox * g.stride + kx - g.pad_w;
    bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
    cols[i] = inside ? x[((b * g.h + iy) * g.w + ix) * g.c + ci] : 0.0f;
  }
}

// The output positions whose window covers input coordinate `in`.
__device__ __forceinline__ void CoveringRange(int64_t in, int64_t pad, int64_t k, int64_t stride,
                                              int64_t out, int64_t* lo, int64_t* hi) {
  int64_t lo_num = in + pad - k + 1;
  *lo = lo_num <= 0 ? 0 : (lo_num + stride - 1) / stride;
  int64_t h = (in + pad) / stride;
  *hi = h < out - 1 ? h : out - 1;
}

__global__ void Col2ImKernel(ConvGeometry g, const float* __restrict__ cols,
                             float* __restrict__ dx) {
  int64_t n = g.n * g.h * g.w * g.c;
  int64_t patch = g.patch();
  KT_GRID_STRIDE(i, n) {
    int64_t ci = i % g.c, ix = (i / g.c) % g.w, iy = (i / (g.c * g.w)) % g.h,
            b = i / (g.c * g.w * g.h);
    int64_t oy_lo, oy_hi, ox_lo, ox_hi;
    CoveringRange(iy, g.pad_h, g.kh, g.stride, g.oh, &oy_lo, &oy_hi);
    CoveringRange(ix, g.pad_w, g.kw, g.stride, g.ow, &ox_lo, &ox_hi);
    float acc = 0.0f;
    for (int64_t oy = oy_lo; oy <= oy_hi; ++oy) {
      int64_t ky = iy + g.pad_h - oy * g.stride;
      for (int64_t ox = ox_lo; ox <= ox_hi; ++ox) {
        int64_t kx = ix + g.pad_w - ox * g.stride;
        acc += cols[((b * g.oh + oy) * g.ow + ox) * patch + (ky * g.kw + kx) * g.c + ci];
      }
    }
    dx[i] = acc;
  }
}

// The window's maximum, scanned in the CPU kernel's order (rows, then
// columns; the first valid pixel starts it). Returns false for a window
// with no valid pixel.
__device__ __forceinline__ bool WindowMax(const PoolGeometry& g, const float* x, int64_t b,
                                          int64_t oy, int64_t ox, int64_t ci, float* best) {
  bool any = false;
  for (int64_t ky = 0; ky < g.k; ++ky) {
    int64_t iy = oy * g.stride + ky - g.pad_h;
    if (iy < 0 || iy >= g.h) continue;
    for (int64_t kx = 0; kx < g.k; ++kx) {
      int64_t ix = ox * g.stride + kx - g.pad_w;
      if (ix < 0 || ix >= g.w) continue;
      float v = x[((b * g.h + iy) * g.w + ix) * g.c + ci];
      if (!any) {
        *best = v;
        any = true;
      } else {
        *best = v > *best ? v : *best;
      }
    }
  }
  return any;
}

__global__ void MaxPoolKernel(PoolGeometry g, const float* __restrict__ x, float* __restrict__ y) {
  int64_t n = g.n * g.oh * g.ow * g.c;
  KT_GRID_STRIDE(i, n) {
    int64_t ci = i % g.c, ox = (i / g.c) % g.ow, oy = (i / (g.c * g.ow)) % g.oh,
            b = i / (g.c * g.ow * g.oh);
    float best = 0.0f;
    if (!WindowMax(g, x, b, oy, ox, ci, &best)) best = 0.0f;
    y[i] = best;
  }
}

__global__ void MaxPoolGradKernel(PoolGeometry g, const float* __restrict__ x,
                                  const float* __restrict__ dy, float* __restrict__ dx) {
  int64_t n = g.n * g.h * g.w * g.c;
  KT_GRID_STRIDE(i, n) {
    int64_t ci = i % g.c, ix = (i / g.c) % g.w, iy = (i / (g.c * g.w)) % g.h,
            b = i / (g.c * g.w * g.h);
    int64_t oy_lo, oy_hi, ox_lo, ox_hi;
    CoveringRange(iy, g.pad_h, g.k, g.stride, g.oh, &oy_lo, &oy_hi);
    CoveringRange(ix, g.pad_w, g.k, g.stride, g.ow, &ox_lo, &ox_hi);
    float acc = 0.0f;
    for (int64_t oy = oy_lo; oy <= oy_hi; ++oy) {
      for (int64_t ox = ox_lo; ox <= ox_hi; ++ox) {
        float best;
        if (!WindowMax(g, x, b, oy, ox, ci, &best)) continue;
        // Is this pixel the window's first pixel holding the maximum?
        bool first = false, found = false;
        for (int64_t ky = 0; ky < g.k && !found; ++ky) {
          int64_t wy = oy * g.stride + ky - g.pad_h;
          if (wy < 0 || wy >= g.h) continue;
          for (int64_t kx = 0; kx < g.k && !found; ++kx) {
            int64_t wx = ox * g.stride + kx - g.pad_w;
            if (wx < 0 || wx >= g.w) continue;
            if (x[((b * g.h + wy) * g.w + wx) * g.c + ci] == best) {
              found = true;
              first = wy == iy && wx == ix;
            }
          }
        }
        if (first) acc += dy[((b * g.oh + oy) * g.ow + ox) * g.c + ci];
      }
    }
    dx[i] = acc;
  }
}

__global__ void SgdKernel(const float* __restrict__ g, float* __restrict__ w, int64_t n, float lr) {
  KT_GRID_STRIDE(i, n) w[i] -= lr * g[i];
}

__global__ void MomentumKernel(const float* __restrict__ g, float* __restrict__ w,
                               float* __restrict__ v, int64_t n, float lr, float mu,
                               bool nesterov) {
  KT_GRID_STRIDE(i, n) {
    float vi = mu * v[i] + g[i];
    v[i] = vi;
    w[i] -= nesterov ? lr * (g[i] + mu * vi) : lr * vi;
  }
}

__global__ void AdagradKernel(const float* __restrict__ g, float* __restrict__ w,
                              float* __restrict__ acc, int64_t n, float lr, float eps) {
  KT_GRID_STRIDE(i, n) {
    float a = acc[i] + g[i] * g[i];
    acc[i] = a;
    w[i] -= lr * g[i] / (sqrtf(a) + eps);
  }
}

__global__ void AdamKernel(const float* __restrict__ g, float* __restrict__ w,
                           float* __restrict__ m, float* __restrict__ v, int64_t n, float lr_t,
                           float b1, float b2, float eps) {
  KT_GRID_STRIDE(i, n) {
    float gi = g[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] -= lr_t * mi / (sqrtf(vi) + eps);
  }
}

cudaError_t Launched() { return cudaGetLastError(); }

unsigned WarpRowBlocks(int64_t rows) { return Blocks(rows * kWarp); }

}  // namespace

cudaError_t LaunchFill(cudaStream_t stream, float* y, int64_t n, float value) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(y, n, value);
  return Launched();
}

cudaError_t LaunchUnary(cudaStream_t stream, UnaryOp op, const float* x, float* y, int64_t n) {
  if (n == 0) return cudaSuccess;
  UnaryKernel<<<Blocks(n), kThreads, 0, stream>>>(op, x, y, n);
  return Launched();
}

cudaError_t LaunchBinary(cudaStream_t stream, BinaryOp op, const float* a, int64_t a_step,
                         const float* b, int64_t b_step, float* y, int64_t n) {
  if (n == 0) return cudaSuccess;
  BinaryKernel<<<Blocks(n), kThreads, 0, stream>>>(op, a, a_step, b, b_step, y, n);
  return Launched();
}

cudaError_t LaunchBiasActivation(cudaStream_t stream, Activation act, const float* x,
                                 const float* bias, float* y, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return cudaSuccess;
  BiasActivationKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(act, x, bias, y, rows, cols);
  return Launched();
}

cudaError_t LaunchBiasActivationGrad(cudaStream_t stream, Activation act, const float* dy,
                                     const float* y, float* dz, float* db, int64_t rows,
                                     int64_t cols) {
  if (cols == 0) return cudaSuccess;
  // About 64 rows per row lane before splitting the rows across blocks.
  constexpr int64_t kRowsPerBlock = 512;
  int64_t row_blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (row_blocks < 1) row_blocks = 1;
  if (row_blocks > 1024) row_blocks = 1024;
  int64_t rows_per_block = (rows + row_blocks - 1) / row_blocks;
  if (rows_per_block < 1) rows_per_block = 1;
  bool atomic = row_blocks > 1;
  if (atomic) {
    cudaError_t e = cudaMemsetAsync(db, 0, static_cast<size_t>(cols) * sizeof(float), stream);
    if (e != cudaSuccess) return e;
  }
  dim3 block(32, 8);
  dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(row_blocks));
  BiasActivationGradKernel<<<grid, block, 0, stream>>>(act, dy, y, dz, db, rows, cols,
                                                       rows_per_block, atomic);
  return Launched();
}

cudaError_t LaunchReduce(cudaStream_t stream, const ReduceGeometry& g, const float* x, float* y,
                         float scale) {
  if (g.out_count == 0) return cudaSuccess;
  if (g.out_count > 0x7fffffff) return cudaErrorInvalidValue;
  ReduceKernel<<<static_cast<unsigned>(g.out_count), kThreads, 0, stream>>>(g, x, y, scale);
  return Launched();
}

cudaError_t LaunchReduceGrad(cudaStream_t stream, int rank, const int64_t* dims,
                             const int64_t* out_strides, const float* dy, float* dx, int64_t n,
                             float scale) {
  if (n == 0) return cudaSuccess;
  if (rank > kMaxRank) return cudaErrorInvalidValue;
  Dims d{}, s{};
  for (int i = 0; i < rank; ++i) {
    d.v[i] = dims[i];
    s.v[i] = out_strides[i];
  }
  ReduceGradKernel<<<Blocks(n), kThreads, 0, stream>>>(rank, d, s, dy, dx, n, scale);
  return Launched();
}

cudaError_t LaunchSumAll(cudaStream_t stream, const float* x, float* y, int64_t n, float scale) {
  SumAllKernel<<<1, kThreads, 0, stream>>>(x, y, n, scale);
  return Launched();
}

cudaError_t LaunchSoftmaxCrossEntropy(cudaStream_t stream, const float* logits, const float* labels,
                                      int64_t n, int64_t k, float* loss, float* backprop,
                                      float* row_loss, KernelErrorRecord* err) {
  if (n > 0 && k > 0) {
    SoftmaxCrossEntropyKernel<<<WarpRowBlocks(n), kThreads, 0, stream>>>(logits, labels, n, k,
                                                                         backprop, row_loss, err);
    if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  }
  return LaunchSumAll(stream, row_loss, loss, k > 0 ? n : 0,
                      n > 0 ? 1.0f / static_cast<float>(n) : 0.0f);
}

cudaError_t LaunchSoftmax(cudaStream_t stream, const float* logits, float* probabilities, int64_t n,
                          int64_t k) {
  if (n == 0 || k == 0) return cudaSuccess;
  SoftmaxKernel<<<WarpRowBlocks(n), kThreads, 0, stream>>>(logits, probabilities, n, k);
  return Launched();
}

cudaError_t LaunchAccuracy(cudaStream_t stream, const float* logits, const float* labels, int64_t n,
                           int64_t k, float* out, float* row_scratch, KernelErrorRecord* err) {
  if (n > 0 && k > 0) {
    AccuracyRowsKernel<<<WarpRowBlocks(n), kThreads, 0, stream>>>(logits, labels, n, k, row_scratch,
                                                                  err);
    if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  }
  return LaunchSumAll(stream, row_scratch, out, k > 0 ? n : 0,
                      n > 0 ? 1.0f / static_cast<float>(n) : 0.0f);
}

cudaError_t LaunchDropout(cudaStream_t stream, const float* x, float* y, float* mask, int64_t n,
                          uint64_t state, uint64_t threshold, float keep_scale) {
  if (n == 0) return cudaSuccess;
  DropoutKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, mask, n, state, threshold, keep_scale);
  return Launched();
}

cudaError_t LaunchIm2Col(cudaStream_t stream, const ConvGeometry& g, const float* x, float* cols) {
  int64_t n = g.rows() * g.patch();
  if (n == 0) return cudaSuccess;
  Im2ColKernel<<<Blocks(n), kThreads, 0, stream>>>(g, x, cols);
  return Launched();
}

cudaError_t LaunchCol2Im(cudaStream_t stream, const ConvGeometry& g, const float* cols, float* dx) {
  int64_t n = g.n * g.h * g.w * g.c;
  if (n == 0) return cudaSuccess;
  Col2ImKernel<<<Blocks(n), kThreads, 0, stream>>>(g, cols, dx);
  return Launched();
}

cudaError_t LaunchMaxPool(cudaStream_t stream, const PoolGeometry& g, const float* x, float* y) {
  int64_t n = g.n * g.oh * g.ow * g.c;
  if (n == 0) return cudaSuccess;
  MaxPoolKernel<<<Blocks(n), kThreads, 0, stream>>>(g, x, y);
  return Launched();
}

cudaError_t LaunchMaxPoolGrad(cudaStream_t stream, const PoolGeometry& g, const float* x,
                              const float* dy, float* dx) {
  int64_t n = g.n * g.h * g.w * g.c;
  if (n == 0) return cudaSuccess;
  MaxPoolGradKernel<<<Blocks(n), kThreads, 0, stream>>>(g, x, dy, dx);
  return Launched();
}

cudaError_t LaunchSgdUpdate(cudaStream_t stream, const float* g, float* w, int64_t n, float lr) {
  if (n == 0) return cudaSuccess;
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(g, w, n, lr);
  return Launched();
}

cudaError_t LaunchMomentumUpdate(cudaStream_t stream, const float* g, float* w, float* v, int64_t n,
                                 float lr, float momentum, bool nesterov) {
  if (n == 0) return cudaSuccess;
  MomentumKernel<<<Blocks(n), kThreads, 0, stream>>>(g, w, v, n, lr, momentum, nesterov);
  return Launched();
}

cudaError_t LaunchAdagradUpdate(cudaStream_t stream, const float* g, float* w, float* acc,
                                int64_t n, float lr, float epsilon) {
  if (n == 0) return cudaSuccess;
  AdagradKernel<<<Blocks(n), kThreads, 0, stream>>>(g, w, acc, n, lr, epsilon);
  return Launched();
}

cudaError_t LaunchAdamUpdate(cudaStream_t stream, const float* g, float* w, float* m, float* v,
                             int64_t n, float lr_t, float beta1, float beta2, float epsilon_hat) {
  if (n == 0) return cudaSuccess;
  AdamKernel<<<Blocks(n), kThreads, 0, stream>>>(g, w, m, v, n, lr_t, beta1, beta2, epsilon_hat);
  return Launched();
}

}  // namespace kubetrain::runtime::cuda
