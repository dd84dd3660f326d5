#pragma once

// Loops of the reference CPU kernels (cpu_kernels.cc) that the oneDNN
// kernels run too, on their own layouts: one implementation of the bias,
// activation and pooling arithmetic, so both paths agree bit for bit there.
// Internal to the engine.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/graph.h"
#include "trainer-runtime/engine/tensor.h"

namespace kubetrain::runtime::engine {

// InvalidArgument naming the kernel's node.
absl::Status KernelError(const KernelContext& c, absl::string_view what);

enum class Activation { kLinear, kRelu, kTanh, kSigmoid };
// The node's "activation" attribute; linear when absent.
Activation ParseActivation(const Node& node);

// y = act(x + b) on `rows` rows of `cols` values, b of `cols`.
void BiasActivationRows(Activation act, const float* x, const float* b, float* y, int64_t rows,
                        int64_t cols);
// dz = dy * act'(y) from the activation's output y, and db = the column
// sums of dz (overwritten, not accumulated).
void BiasActivationGradRows(Activation act, const float* dy, const float* y, float* dz, float* db,
                            int64_t rows, int64_t cols);

// A convolution's shapes, from the node's stride and padding and an NHWC
// input of shape `x`.
struct ConvGeometry {
  int64_t n, h, w, c, kh, kw, out_c, oh, ow, stride, pad_h, pad_w;
  int64_t patch() const { return kh * kw * c; }
  int64_t rows() const { return n * oh * ow; }
};
absl::StatusOr<ConvGeometry> GetConvGeometry(const KernelContext& c, const Shape& x, int64_t kh,
                                             int64_t kw, int64_t out_c);

// A max pooling's shapes, from the node's ksize, stride and padding and an
// NHWC input of shape `x`.
struct PoolGeometry {
  int64_t n, h, w, c, k, stride, oh, ow, pad_h, pad_w;
};
absl::StatusOr<PoolGeometry> GetPoolGeometry(const KernelContext& c, const Shape& x);
// The same for the pooling node `pool` (a fused kernel's producer).
absl::StatusOr<PoolGeometry> GetPoolGeometry(const KernelContext& c, const Node& pool,
                                             const Shape& x);

// On g.n images of [h, w, c] floats (channels innermost); a window with no
// pixel inside the image gives 0.
void MaxPoolForward(const PoolGeometry& g, const float* x, float* y);
// dx (overwritten) from dy: each pooled gradient goes to the first maximum
// of its window, the element MaxPoolForward picked.
void MaxPoolBackward(const PoolGeometry& g, const float* x, const float* dy, float* dx);

}  // namespace kubetrain::runtime::engine
