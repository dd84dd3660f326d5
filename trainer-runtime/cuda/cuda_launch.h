#pragma once

// Launchers for the CUDA kernels in cuda_kernels.cu. Plain types only, so
// that the .cu file needs no engine, absl or protobuf headers (nvcc stays
// fast and away from host-only headers). Every launcher queues its work on
// `stream` and returns the launch error (cudaGetLastError), cudaSuccess
// otherwise; none waits for the device. Pointers are device memory.

#include <cuda_runtime_api.h>

#include <cstdint>

// Small geometry helpers are used on both sides of a launch.
#ifdef __CUDACC__
#define KUBETRAIN_HOST_DEVICE __host__ __device__
#else
#define KUBETRAIN_HOST_DEVICE
#endif

namespace kubetrain::runtime::cuda {

// Written by kernels that validate data: the first (lowest) bad row.
struct KernelErrorRecord {
  int32_t row;  // INT32_MAX: none
};

enum class UnaryOp : int { kNeg, kRelu, kTanh, kSigmoid };
// Gradient ops take (dy, y): the gradient in terms of the op's output.
enum class BinaryOp : int { kAdd, kSub, kMul, kReluGrad, kTanhGrad, kSigmoidGrad };
enum class Activation : int { kLinear, kRelu, kTanh, kSigmoid };

constexpr int kMaxRank = 8;

cudaError_t LaunchFill(cudaStream_t stream, float* y, int64_t n, float value);
cudaError_t LaunchUnary(cudaStream_t stream, UnaryOp op, const float* x, float* y, int64_t n);
// y[i] = op(a[i * a_step], b[i * b_step]); a step of 0 broadcasts a scalar.
cudaError_t LaunchBinary(cudaStream_t stream, BinaryOp op, const float* a, int64_t a_step,
                         const float* b, int64_t b_step, float* y, int64_t n);
// y = act(x + bias) over [rows, cols].
cudaError_t LaunchBiasActivation(cudaStream_t stream, Activation act, const float* x,
                                 const float* bias, float* y, int64_t rows, int64_t cols);
// dz = dy * act'(y) (skipped when dz is null), db = column sums of dz, in
// one pass over dy.
cudaError_t LaunchBiasActivationGrad(cudaStream_t stream, Activation act, const float* dy,
                                     const float* y, float* dz, float* db, int64_t rows,
                                     int64_t cols);

// A reduction seen as out[o] = scale * sum over the reduced sub-space. Dims
// are split into kept axes (which index the output, row-major) and reduced
// axes; strides are the input's, in elements.
struct ReduceGeometry {
  int kept_rank = 0;
  int64_t kept_dims[kMaxRank] = {};
  int64_t kept_strides[kMaxRank] = {};
  int reduced_rank = 0;
  int64_t reduced_dims[kMaxRank] = {};
  int64_t reduced_strides[kMaxRank] = {};
  int64_t reduced_count = 1;
  int64_t out_count = 1;
};
cudaError_t LaunchReduce(cudaStream_t stream, const ReduceGeometry& g, const float* x, float* y,
                         float scale);
// dx[i] = scale * dy[out_index(i)], where out_index uses `out_strides` (0 on
// reduced axes) over `dims`.
cudaError_t LaunchReduceGrad(cudaStream_t stream, int rank, const int64_t* dims,
                             const int64_t* out_strides, const float* dy, float* dx, int64_t n,
                             float scale);
// Sum of all n elements into y[0], in double.
cudaError_t LaunchSumAll(cudaStream_t stream, const float* x, float* y, int64_t n, float scale);

// Fused softmax + cross-entropy over [n, k] logits with float class labels:
// backprop = (softmax - onehot) / n, loss[0] = mean of the row losses.
// `row_loss` is scratch of n floats. A label that is not an integer in
// [0, k) sets err->row (atomic min) and contributes nothing.
cudaError_t LaunchSoftmaxCrossEntropy(cudaStream_t stream, const float* logits, const float* labels,
                                      int64_t n, int64_t k, float* loss, float* backprop,
                                      float* row_loss, KernelErrorRecord* err);
cudaError_t LaunchSoftmax(cudaStream_t stream, const float* logits, float* probabilities, int64_t n,
                          int64_t k);
// out[0] = fraction of rows whose first arg-max equals the label.
cudaError_t LaunchAccuracy(cudaStream_t stream, const float* logits, const float* labels, int64_t n,
                           int64_t k, float* out, float* row_scratch, KernelErrorRecord* err);

// Inverted dropout with the CPU kernel's random stream: element i draws the
// (i+1)-th SplitMix64 output from `state`, so masks match the CPU exactly.
cudaError_t LaunchDropout(cudaStream_t stream, const float* x, float* y, float* mask, int64_t n,
                          uint64_t state, uint64_t threshold, float keep_scale);

struct ConvGeometry {
  int64_t n, h, w, c, kh, kw, out_c, oh, ow, stride, pad_h, pad_w;
  KUBETRAIN_HOST_DEVICE int64_t patch() const { return kh * kw * c; }
  KUBETRAIN_HOST_DEVICE int64_t rows() const { return n * oh * ow; }
};
// cols[(n,oy,ox), (ky,kx,ci)] = x[n, oy*s+ky-pad, ox*s+kx-pad, ci] (0 outside).
cudaError_t LaunchIm2Col(cudaStream_t stream, const ConvGeometry& g, const float* x, float* cols);
// The adjoint, as a gather (one thread per input element, no atomics).
cudaError_t LaunchCol2Im(cudaStream_t stream, const ConvGeometry& g, const float* cols, float* dx);

struct PoolGeometry {
  int64_t n, h, w, c, k, stride, oh, ow, pad_h, pad_w;
};
cudaError_t LaunchMaxPool(cudaStream_t stream, const PoolGeometry& g, const float* x, float* y);
// Each window's gradient goes to the first maximum of the window (the CPU
// kernel's choice), gathered per input element.
cudaError_t LaunchMaxPoolGrad(cudaStream_t stream, const PoolGeometry& g, const float* x,
                              const float* dy, float* dx);

// Fused optimizer updates, in place (one pass over w and the slots).
cudaError_t LaunchSgdUpdate(cudaStream_t stream, const float* g, float* w, int64_t n, float lr);
cudaError_t LaunchMomentumUpdate(cudaStream_t stream, const float* g, float* w, float* v, int64_t n,
                                 float lr, float momentum, bool nesterov);
cudaError_t LaunchAdagradUpdate(cudaStream_t stream, const float* g, float* w, float* acc,
                                int64_t n, float lr, float epsilon);
cudaError_t LaunchAdamUpdate(cudaStream_t stream, const float* g, float* w, float* m, float* v,
                             int64_t n, float lr_t, float beta1, float beta2, float epsilon_hat);

}  // namespace kubetrain::runtime::cuda
