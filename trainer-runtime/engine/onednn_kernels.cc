// The CPU device's oneDNN kernels (CpuKernels::kOneDnn).
//
// Convolutions, their two gradients and matrix products are oneDNN
// primitives, created once per shape and cached in the device's
// OneDnnContext. A convolution or matrix product followed by BiasActivation
// (or BiasAdd) runs as one primitive with the bias and activation as
// post-ops, when the executor fuses the pair.
//
// Layouts: oneDNN's direct convolutions are several times faster on its
// channel-blocked layouts (nChw16c with AVX-512, nChw8c with AVX2) than on
// NHWC, where it falls back to im2col + GEMM. So an activation that is read
// only by this file's kernels stays in the layout the primitive chose
// (KernelContext::MayKeepDeviceLayout); max pooling and the bias/activation
// loops read and write channel-blocked tensors directly (a channel block of
// an image is an NHWC image with the block as its channels, so the
// reference loops in cpu_kernels.cc run on it unchanged), and everything
// else is converted (reordered) to row-major where the graph leaves this
// file's kernels. Filters and dense kernels stay row-major (HWIO, [in, out])
// in the variable store and are reordered per step (they are small), so
// checkpoints do not depend on the kernel path.
//
// Threads: oneDNN runs its primitives on the OpenMP pool it is built with;
// the loops here split their images over the same pool, so there is one
// pool of CpuDevice::num_threads() threads.
#include "trainer-runtime/engine/onednn_kernels.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "trainer-runtime/engine/cpu_kernels.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/op_registry.h"

namespace kubetrain::runtime::engine {

class OneDnnContext {
 public:
  // The cached value for `key`, made by `make` (which may throw
  // dnnl::error) the first time.
  template <typename T, typename Make>
  std::shared_ptr<const T> Get(const std::vector<int64_t>& key, Make make) {
    {
      absl::MutexLock lock(&mu_);
      auto it = cache_.find(key);
      if (it != cache_.end()) return std::static_pointer_cast<const T>(it->second);
    }
    auto made = std::make_shared<const T>(make());
    absl::MutexLock lock(&mu_);
    return std::static_pointer_cast<const T>(cache_.emplace(key, made).first->second);
  }

  // A reorder primitive from one layout to another.
  dnnl::reorder Reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                        const dnnl::engine& engine) {
    absl::MutexLock lock(&mu_);
    for (const auto& r : reorders_) {
      if (r.from == from && r.to == to) return r.primitive;
    }
    dnnl::reorder primitive(dnnl::reorder::primitive_desc(engine, from, engine, to));
    reorders_.push_back({from, to, primitive});
    return primitive;
  }

 private:
  struct CachedReorder {
    dnnl::memory::desc from, to;
    dnnl::reorder primitive;
  };
  absl::Mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<const void>> cache_ ABSL_GUARDED_BY(mu_);
  // Few (a handful of layouts per model): a linear scan is enough.
  std::vector<CachedReorder> reorders_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<OneDnnContext> NewOneDnnContext() { return std::make_shared<OneDnnContext>(); }

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

// A tensor's device layout on this path: oneDNN's description of it.
struct OneDnnLayout final : TensorLayout {
  explicit OneDnnLayout(memory::desc d) : desc(std::move(d)) {}
  memory::desc desc;
};

// One CPU engine for the process (it holds no state of its own), and one
// stream per thread (streams are not thread-safe).
const dnnl::engine& Engine() {
  static const auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}
dnnl::stream& Stream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

// Per-thread scratch memory reused across calls, one block per use within a
// kernel, so a steady training step allocates nothing.
enum ScratchSlot {
  kPrimitiveScratch,
  kSrcScratch,
  kWeightsScratch,
  kDiffDstScratch,
  kDstScratch,
  kBiasScratch,
  kNumScratchSlots
};
void* Scratch(ScratchSlot slot, size_t bytes) {
  thread_local std::array<std::shared_ptr<Buffer>, kNumScratchSlots> blocks;
  std::shared_ptr<Buffer>& block = blocks[slot];
  if (block == nullptr || block->size() < bytes) {
    block =
        std::make_shared<Buffer>(HostAllocator(), std::max<size_t>(bytes, Allocator::kAlignment));
  }
  return block->data();
}

OneDnnContext& Context(const KernelContext& c) {
  return *static_cast<CpuDevice&>(c.device).onednn();
}

// ---- Layouts

// [n, h, w, c] row-major, as oneDNN names it: dims {n, c, h, w}, nhwc.
memory::desc NhwcDesc(const Shape& s) {
  return memory::desc({s[0], s[3], s[1], s[2]}, kF32, Tag::nhwc);
}
// An HWIO filter [kh, kw, in, out]: dims {out, in, kh, kw}, hwio.
memory::desc HwioDesc(const Shape& f) {
  return memory::desc({f[3], f[2], f[0], f[1]}, kF32, Tag::hwio);
}
memory::desc MatrixDesc(int64_t rows, int64_t cols, bool transposed) {
  return memory::desc({rows, cols}, kF32, transposed ? Tag::ba : Tag::ab);
}

// How `t` lies in memory: its device layout, else `row_major`.
absl::StatusOr<memory::desc> DescOf(const KernelContext& c, const Tensor& t,
                                    const memory::desc& row_major) {
  if (t.is_row_major()) return row_major;
  const auto* layout = dynamic_cast<const OneDnnLayout*>(t.layout().get());
  if (layout == nullptr) return KernelError(c, "an input is in another device's layout");
  return layout->desc;
}

// An activation layout the pooling and bias loops read: nhwc (one block of
// all channels) or nChw8c / nChw16c. block 0: another layout.
struct ChannelBlocking {
  int64_t block = 0;
  Tag tag = Tag::undef;
};
ChannelBlocking ChannelBlockOf(const memory::desc& d) {
  const memory::dims dims = d.dims();
  if (dims.size() != 4) return {};
  if (d == memory::desc(dims, kF32, Tag::nhwc)) return {dims[1], Tag::nhwc};
  if (d == memory::desc(dims, kF32, Tag::nChw16c)) return {16, Tag::nChw16c};
  if (d == memory::desc(dims, kF32, Tag::nChw8c)) return {8, Tag::nChw8c};
  return {};
}

void RunReorder(const KernelContext& c, const memory::desc& from, const void* from_data,
                const memory::desc& to, void* to_data) {
  dnnl::reorder r = Context(c).Reorder(from, to, Engine());
  memory src(from, Engine(), const_cast<void*>(from_data));
  memory dst(to, Engine(), to_data);
  r.execute(Stream(), src, dst);
}

// `data` (laid out as `have`) in the layout `want`: itself when they are
// the same, else a copy in scratch slot `slot`.
void* InLayout(const KernelContext& c, const memory::desc& have, const void* data,
               const memory::desc& want, ScratchSlot slot) {
  if (have == want) return const_cast<void*>(data);
  void* copy = Scratch(slot, want.get_size());
  RunReorder(c, have, data, want, copy);
  return copy;
}

// Makes output `out` row-major again (same buffer), if it was not.
void MakeRowMajor(Tensor& out) {
  if (!out.is_row_major()) out = Tensor(out.shape(), out.buffer());
}

// Makes output `out` hold `desc`, reusing its buffer when large enough.
void MakeLayout(KernelContext& c, Tensor& out, const memory::desc& desc) {
  const auto* layout = dynamic_cast<const OneDnnLayout*>(out.layout().get());
  const size_t bytes = desc.get_size();
  if (layout != nullptr && layout->desc == desc && out.buffer()->size() >= bytes) return;
  std::shared_ptr<Buffer> buffer = out.buffer();
  if (buffer == nullptr || buffer->size() < bytes) {
    buffer = std::make_shared<Buffer>(c.device.allocator(), bytes);
  }
  out = Tensor(out.shape(), std::move(buffer)).WithLayout(std::make_shared<OneDnnLayout>(desc));
}

// Where a kernel writes output `index`, produced in layout `produced`: the
// output itself when it may keep that layout (or it is the row-major one),
// else scratch that Finish() reorders into the row-major output.
class OutputBinding {
 public:
  OutputBinding(KernelContext& c, int index, const memory::desc& produced,
                const memory::desc& row_major)
      : c_(c), out_(c.output(index)), produced_(produced), row_major_(row_major) {
    if (produced == row_major) {
      MakeRowMajor(out_);
      data_ = out_.data();
    } else if (c.MayKeepDeviceLayout(index)) {
      MakeLayout(c, out_, produced);
      data_ = out_.data();
    } else {
      MakeRowMajor(out_);
      data_ = Scratch(kDstScratch, produced.get_size());
      copy_ = true;
    }
  }
  void* data() const { return data_; }
  void Finish() {
    if (copy_) RunReorder(c_, produced_, data_, row_major_, out_.data());
  }

 private:
  KernelContext& c_;
  Tensor& out_;
  memory::desc produced_, row_major_;
  void* data_ = nullptr;
  bool copy_ = false;
};

dnnl::primitive_attr Attributes(Activation act) {
  dnnl::primitive_attr attr;
  // Scratch memory is passed per call, so primitives may run concurrently.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (act != Activation::kLinear) {
    dnnl::algorithm alg = act == Activation::kRelu   ? dnnl::algorithm::eltwise_relu
                          : act == Activation::kTanh ? dnnl::algorithm::eltwise_tanh
                                                     : dnnl::algorithm::eltwise_logistic;
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, alg, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

memory ScratchpadOf(const dnnl::primitive_desc_base& pd) {
  const memory::desc d = pd.scratchpad_desc();
  return memory(d, Engine(), Scratch(kPrimitiveScratch, d.get_size()));
}

// OpenMP's thread count is per calling thread: set it for oneDNN and the
// loops below before each kernel.
void UseThreads(const KernelContext& c) {
  const int threads = c.device.num_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

// f(begin, end) over [0, count) split evenly over the pool.
template <typename F>
void ParallelFor(const KernelContext& c, int64_t count, F f) {
  const int threads = static_cast<int>(std::min<int64_t>(c.device.num_threads(), count));
  if (threads <= 1) {
    if (count > 0) f(int64_t{0}, count);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = count * t / nt, end = count * (t + 1) / nt;
    if (begin < end) f(begin, end);
  }
}

// ---- The reference kernels, for what the primitives do not cover (empty
// shapes), on row-major copies of the inputs.

absl::Status RunReference(KernelContext& c) {
  std::vector<Tensor> row_major;
  std::vector<const Tensor*> inputs;
  row_major.reserve(c.inputs.size());
  for (const Tensor* t : c.inputs) {
    if (t->is_row_major()) {
      inputs.push_back(t);
      continue;
    }
    const Shape& s = t->shape();
    if (s.size() != 4) return KernelError(c, "a device layout that is not an activation");
    absl::StatusOr<memory::desc> have = DescOf(c, *t, NhwcDesc(s));
    if (!have.ok()) return have.status();
    row_major.push_back(Tensor::Host(s));
    RunReorder(c, *have, t->data(), NhwcDesc(s), row_major.back().data());
    inputs.push_back(&row_major.back());
  }
  for (Tensor& out : c.outputs) MakeRowMajor(out);
  const auto& table = CpuKernelTable();
  if (c.producer == nullptr) {
    KernelContext ref{c.node, inputs, c.outputs, c.device, c.run};
    return table.at(c.node.op)(ref);
  }
  // A fused pair: the producer into a temporary, then the consumer.
  const Node& producer = *c.producer;
  const size_t produced_inputs = static_cast<size_t>(FindOpDef(producer.op)->num_inputs);
  std::vector<const Shape*> shapes;
  for (size_t i = 0; i < produced_inputs; ++i) shapes.push_back(&inputs[i]->shape());
  absl::StatusOr<std::vector<Shape>> produced_shape =
      FindOpDef(producer.op)->shape_fn(producer, shapes);
  if (!produced_shape.ok()) return produced_shape.status();
  std::vector<Tensor> produced = {Tensor::Host((*produced_shape)[0])};
  KernelContext first{producer, std::span(inputs).first(produced_inputs), produced, c.device,
                      c.run};
  if (absl::Status s = table.at(producer.op)(first); !s.ok()) return s;
  std::vector<const Tensor*> consumer_inputs = {&produced[0]};
  for (size_t i = produced_inputs; i < inputs.size(); ++i) consumer_inputs.push_back(inputs[i]);
  KernelContext second{c.node, consumer_inputs, c.outputs, c.device, c.run};
  return table.at(c.node.op)(second);
}

// ---- Convolutions

struct ConvShape {
  int64_t n, h, w, c, kh, kw, out_c, oh, ow, stride, pad_top, pad_left, pad_bottom, pad_right;
  memory::dims src() const { return {n, c, h, w}; }
  memory::dims weights() const { return {out_c, c, kh, kw}; }
  memory::dims dst() const { return {n, out_c, oh, ow}; }
  bool empty() const { return n * h * w * c * kh * kw * out_c * oh * ow == 0; }
  std::vector<int64_t> Key(int64_t kind) const {
    return {kind, n, h, w, c, kh, kw, out_c, stride, pad_top, pad_left, pad_bottom, pad_right};
  }
};

// The convolution `conv` of an NHWC input of shape x with an HWIO filter of
// shape f, with TensorFlow's SAME/VALID windows. oneDNN's output size is
// (in - k + pad_before + pad_after) / stride + 1, so the after-padding is
// what the output size leaves over (never negative: a window that would
// need none is the same with zero).
absl::StatusOr<ConvShape> ConvShapeOf(const KernelContext& c, const Node& conv, const Shape& x,
                                      const Shape& f) {
  ConvShape s{};
  s.n = x[0], s.h = x[1], s.w = x[2], s.c = x[3], s.kh = f[0], s.kw = f[1], s.out_c = f[3];
  s.stride = conv.GetInt("stride", 1);
  const std::string padding = conv.GetString("padding", "SAME");
  auto gh = ComputeWindow(s.h, s.kh, s.stride, padding);
  auto gw = ComputeWindow(s.w, s.kw, s.stride, padding);
  if (!gh.ok()) return KernelError(c, gh.status().message());
  if (!gw.ok()) return KernelError(c, gw.status().message());
  s.oh = gh->out, s.ow = gw->out, s.pad_top = gh->pad_before, s.pad_left = gw->pad_before;
  s.pad_bottom = std::max<int64_t>((s.oh - 1) * s.stride + s.kh - s.h - s.pad_top, 0);
  s.pad_right = std::max<int64_t>((s.ow - 1) * s.stride + s.kw - s.w - s.pad_left, 0);
  return s;
}

enum PrimitiveKind : int64_t { kConvForward, kConvBackwardData, kConvBackwardWeights, kMatMul };

dnnl::convolution_forward::desc ConvForwardDesc(const ConvShape& s, bool bias) {
  const memory::desc src(s.src(), kF32, Tag::any), weights(s.weights(), kF32, Tag::any),
      dst(s.dst(), kF32, Tag::any);
  const memory::dims strides = {s.stride, s.stride}, pad_l = {s.pad_top, s.pad_left},
                     pad_r = {s.pad_bottom, s.pad_right};
  // Direct convolution only: Winograd's transforms cost accuracy.
  if (bias) {
    return dnnl::convolution_forward::desc(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, weights,
        memory::desc({s.out_c}, kF32, Tag::x), dst, strides, pad_l, pad_r);
  }
  return dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                         dnnl::algorithm::convolution_direct, src, weights, dst,
                                         strides, pad_l, pad_r);
}

struct ConvForward {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward primitive;
};

// y = act(conv(x, f) + bias); bias null for none.
absl::Status ConvForwardRun(KernelContext& c, const Node& conv, const Tensor& x, const Tensor& f,
                            const Tensor* bias, Activation act) {
  absl::StatusOr<ConvShape> s = ConvShapeOf(c, conv, x.shape(), f.shape());
  if (!s.ok()) return s.status();
  if (s->empty()) return RunReference(c);
  std::vector<int64_t> key = s->Key(kConvForward);
  key.push_back(bias != nullptr);
  key.push_back(static_cast<int64_t>(act));
  auto prim = Context(c).Get<ConvForward>(key, [&] {
    dnnl::convolution_forward::primitive_desc pd(ConvForwardDesc(*s, bias != nullptr),
                                                 Attributes(act), Engine());
    return ConvForward{pd, dnnl::convolution_forward(pd)};
  });
  const auto& pd = prim->pd;
  absl::StatusOr<memory::desc> x_desc = DescOf(c, x, NhwcDesc(x.shape()));
  absl::StatusOr<memory::desc> f_desc = DescOf(c, f, HwioDesc(f.shape()));
  if (!x_desc.ok()) return x_desc.status();
  if (!f_desc.ok()) return f_desc.status();
  void* src = InLayout(c, *x_desc, x.data(), pd.src_desc(), kSrcScratch);
  void* weights = InLayout(c, *f_desc, f.data(), pd.weights_desc(), kWeightsScratch);
  OutputBinding dst(c, 0, pd.dst_desc(), NhwcDesc(c.output(0).shape()));
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(pd.src_desc(), Engine(), src)},
      {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), Engine(), weights)},
      {DNNL_ARG_DST, memory(pd.dst_desc(), Engine(), dst.data())},
      {DNNL_ARG_SCRATCHPAD, ScratchpadOf(pd)}};
  if (bias != nullptr) {
    args.emplace(DNNL_ARG_BIAS, memory(pd.bias_desc(), Engine(), bias->data()));
  }
  prim->primitive.execute(Stream(), args);
  dst.Finish();
  return absl::OkStatus();
}

absl::Status Conv2DKernel(KernelContext& c) {
  return ConvForwardRun(c, c.node, c.input(0), c.input(1), nullptr, Activation::kLinear);
}

// Conv2D fused with the BiasActivation or BiasAdd that reads it: inputs
// (input, filter, bias).
absl::Status Conv2DBiasActivationKernel(KernelContext& c) {
  return ConvForwardRun(c, *c.producer, c.input(0), c.input(1), &c.input(2),
                        ParseActivation(c.node));
}

struct ConvBackwardData {
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data primitive;
};

// (dy, filter, input) -> dx.
absl::Status Conv2DBackpropInputKernel(KernelContext& c) {
  const Tensor& dy = c.input(0);
  const Tensor& f = c.input(1);
  absl::StatusOr<ConvShape> s = ConvShapeOf(c, c.node, c.input(2).shape(), f.shape());
  if (!s.ok()) return s.status();
  if (s->empty()) return RunReference(c);
  auto prim = Context(c).Get<ConvBackwardData>(s->Key(kConvBackwardData), [&] {
    dnnl::convolution_forward::primitive_desc hint(ConvForwardDesc(*s, false), Engine());
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(
            dnnl::algorithm::convolution_direct, memory::desc(s->src(), kF32, Tag::any),
            memory::desc(s->weights(), kF32, Tag::any), memory::desc(s->dst(), kF32, Tag::any),
            {s->stride, s->stride}, {s->pad_top, s->pad_left}, {s->pad_bottom, s->pad_right}),
        Attributes(Activation::kLinear), Engine(), hint);
    return ConvBackwardData{pd, dnnl::convolution_backward_data(pd)};
  });
  const auto& pd = prim->pd;
  absl::StatusOr<memory::desc> dy_desc = DescOf(c, dy, NhwcDesc(dy.shape()));
  absl::StatusOr<memory::desc> f_desc = DescOf(c, f, HwioDesc(f.shape()));
  if (!dy_desc.ok()) return dy_desc.status();
  if (!f_desc.ok()) return f_desc.status();
  void* diff_dst = InLayout(c, *dy_desc, dy.data(), pd.diff_dst_desc(), kDiffDstScratch);
  void* weights = InLayout(c, *f_desc, f.data(), pd.weights_desc(), kWeightsScratch);
  OutputBinding diff_src(c, 0, pd.diff_src_desc(), NhwcDesc(c.output(0).shape()));
  prim->primitive.execute(
      Stream(), {{DNNL_ARG_DIFF_DST, memory(pd.diff_dst_desc(), Engine(), diff_dst)},
                 {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), Engine(), weights)},
                 {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), Engine(), diff_src.data())},
                 {DNNL_ARG_SCRATCHPAD, ScratchpadOf(pd)}});
  diff_src.Finish();
  return absl::OkStatus();
}

struct ConvBackwardWeights {
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights primitive;
};

// (input, dy, filter) -> dfilter.
absl::Status Conv2DBackpropFilterKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  const Tensor& dy = c.input(1);
  absl::StatusOr<ConvShape> s = ConvShapeOf(c, c.node, x.shape(), c.input(2).shape());
  if (!s.ok()) return s.status();
  if (s->empty()) return RunReference(c);
  auto prim = Context(c).Get<ConvBackwardWeights>(s->Key(kConvBackwardWeights), [&] {
    dnnl::convolution_forward::primitive_desc hint(ConvForwardDesc(*s, false), Engine());
    dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(
            dnnl::algorithm::convolution_direct, memory::desc(s->src(), kF32, Tag::any),
            memory::desc(s->weights(), kF32, Tag::any), memory::desc(s->dst(), kF32, Tag::any),
            {s->stride, s->stride}, {s->pad_top, s->pad_left}, {s->pad_bottom, s->pad_right}),
        Attributes(Activation::kLinear), Engine(), hint);
    return ConvBackwardWeights{pd, dnnl::convolution_backward_weights(pd)};
  });
  const auto& pd = prim->pd;
  absl::StatusOr<memory::desc> x_desc = DescOf(c, x, NhwcDesc(x.shape()));
  absl::StatusOr<memory::desc> dy_desc = DescOf(c, dy, NhwcDesc(dy.shape()));
  if (!x_desc.ok()) return x_desc.status();
  if (!dy_desc.ok()) return dy_desc.status();
  void* src = InLayout(c, *x_desc, x.data(), pd.src_desc(), kSrcScratch);
  void* diff_dst = InLayout(c, *dy_desc, dy.data(), pd.diff_dst_desc(), kDiffDstScratch);
  OutputBinding diff_weights(c, 0, pd.diff_weights_desc(), HwioDesc(c.output(0).shape()));
  prim->primitive.execute(
      Stream(),
      {{DNNL_ARG_SRC, memory(pd.src_desc(), Engine(), src)},
       {DNNL_ARG_DIFF_DST, memory(pd.diff_dst_desc(), Engine(), diff_dst)},
       {DNNL_ARG_DIFF_WEIGHTS, memory(pd.diff_weights_desc(), Engine(), diff_weights.data())},
       {DNNL_ARG_SCRATCHPAD, ScratchpadOf(pd)}});
  diff_weights.Finish();
  return absl::OkStatus();
}

// ---- Matrix products

struct MatMul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
};

// out = act(op(a) op(b) + bias) with the transposes of `matmul`; bias null
// for none. Operands are row-major matrices (MatMul takes no device
// layouts).
absl::Status MatMulRun(KernelContext& c, const Node& matmul, const Tensor* bias, Activation act) {
  const Tensor& a = c.input(0);
  const Tensor& b = c.input(1);
  Tensor& out = c.output(0);
  MakeRowMajor(out);
  const bool ta = matmul.GetBool("transpose_a"), tb = matmul.GetBool("transpose_b");
  const int64_t m = out.dim(0), n = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  if (m == 0 || n == 0 || k == 0) return RunReference(c);
  const std::vector<int64_t> key = {
      kMatMul, m, n, k, ta, tb, bias != nullptr, static_cast<int64_t>(act)};
  auto prim = Context(c).Get<MatMul>(key, [&] {
    const memory::desc bias_desc =
        bias != nullptr ? memory::desc({1, n}, kF32, Tag::ab) : memory::desc();
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(MatrixDesc(m, k, ta), MatrixDesc(k, n, tb),
                                                       bias_desc, MatrixDesc(m, n, false)),
                                    Attributes(act), Engine());
    return MatMul{pd, dnnl::matmul(pd)};
  });
  const auto& pd = prim->pd;
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, memory(pd.src_desc(), Engine(), a.data())},
      {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), Engine(), b.data())},
      {DNNL_ARG_DST, memory(pd.dst_desc(), Engine(), out.data())},
      {DNNL_ARG_SCRATCHPAD, ScratchpadOf(pd)}};
  if (bias != nullptr) {
    args.emplace(DNNL_ARG_BIAS, memory(pd.bias_desc(), Engine(), bias->data()));
  }
  prim->primitive.execute(Stream(), args);
  return absl::OkStatus();
}

absl::Status MatMulKernel(KernelContext& c) {
  return MatMulRun(c, c.node, nullptr, Activation::kLinear);
}

// MatMul fused with the BiasActivation or BiasAdd that reads it: inputs
// (a, b, bias).
absl::Status MatMulBiasActivationKernel(KernelContext& c) {
  return MatMulRun(c, *c.producer, &c.input(2), ParseActivation(c.node));
}

// ---- Loops on channel-blocked activations

// An activation input of the loops below: its data in a layout they read
// (channel-blocked or NHWC), reordered to NHWC in scratch when it is in
// another.
struct BlockedInput {
  const float* data = nullptr;
  memory::desc desc;
  int64_t block = 0;
  Tag tag = Tag::undef;
  // The layout of another activation (an output, a gradient) of `dims`.
  memory::desc Like(const Shape& nhwc_shape) const {
    return memory::desc(NhwcDesc(nhwc_shape).dims(), kF32, tag);
  }
};
absl::StatusOr<BlockedInput> ReadBlocked(const KernelContext& c, const Tensor& t,
                                         ScratchSlot slot) {
  absl::StatusOr<memory::desc> d = DescOf(c, t, NhwcDesc(t.shape()));
  if (!d.ok()) return d.status();
  ChannelBlocking blocking = ChannelBlockOf(*d);
  BlockedInput in{t.data(), *d, blocking.block, blocking.tag};
  if (in.block == 0) {
    in.desc = NhwcDesc(t.shape());
    in.data = static_cast<const float*>(InLayout(c, *d, t.data(), in.desc, slot));
    in.block = t.dim(3);
    in.tag = Tag::nhwc;
  }
  return in;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Max pooling on images of [h, w, kBlock] floats (one channel block each):
// the reference loops' arithmetic on whole blocks, as GCC/clang vector
// types so that the selects become vector compares and masks rather than
// one branch per lane. The build targets baseline x86-64, so these are
// inlined into functions compiled for AVX-512 (16 lanes) and AVX2 (8),
// chosen at run time; other machines run the reference loops.
#define KT_INLINE inline __attribute__((always_inline))
// Vector arguments of always-inlined helpers never cross a call, so the
// ABI the warning is about never applies.
#pragma GCC diagnostic ignored "-Wpsabi"
// (The vector types are spelt out per width: GCC drops a vector_size that
// depends on a template parameter.)
typedef float Floats8 __attribute__((vector_size(32)));
typedef int32_t Ints8 __attribute__((vector_size(32)));
typedef float Floats16 __attribute__((vector_size(64)));
typedef int32_t Ints16 __attribute__((vector_size(64)));
template <int kBlock>
struct LaneTypes;
template <>
struct LaneTypes<8> {
  using F = Floats8;
  using I = Ints8;
};
template <>
struct LaneTypes<16> {
  using F = Floats16;
  using I = Ints16;
};
template <int kBlock>
struct Lanes {
  using F = typename LaneTypes<kBlock>::F;
  using I = typename LaneTypes<kBlock>::I;
  static_assert(sizeof(F) == kBlock * sizeof(float));
  static KT_INLINE F Load(const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static KT_INLINE void Store(float* p, F v) { std::memcpy(p, &v, sizeof v); }
  // mask ? a : b, lane by lane (mask lanes are all ones or all zeros).
  static KT_INLINE F Select(I mask, F a, F b) { return (F)(((I)a & mask) | ((I)b & ~mask)); }
};

// The window [lo, hi) of output `o` along an axis, clipped to the image.
struct WindowRange {
  int64_t lo, hi;
};
inline WindowRange Window(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t size) {
  const int64_t start = o * stride - pad;
  return {std::max<int64_t>(start, 0), std::min<int64_t>(start + k, size)};
}

// Whether every pixel is in exactly one window.
bool Tiles(const PoolGeometry& g) {
  return g.stride == g.k && g.pad_h == 0 && g.pad_w == 0 && g.oh * g.k == g.h && g.ow * g.k == g.w;
}

template <int kBlock>
KT_INLINE void MaxPoolForwardBlocked(const PoolGeometry& g, const float* __restrict x,
                                     float* __restrict y) {
  using L = Lanes<kBlock>;
  for (int64_t b = 0; b < g.n; ++b) {
    const float* image = x + b * g.h * g.w * kBlock;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const WindowRange ry = Window(oy, g.stride, g.pad_h, g.k, g.h);
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const WindowRange rx = Window(ox, g.stride, g.pad_w, g.k, g.w);
        float* out = y + ((b * g.oh + oy) * g.ow + ox) * kBlock;
        if (ry.lo >= ry.hi || rx.lo >= rx.hi) {
          L::Store(out, typename L::F{});
          continue;
        }
        typename L::F best = L::Load(image + (ry.lo * g.w + rx.lo) * kBlock);
        for (int64_t iy = ry.lo; iy < ry.hi; ++iy) {
          for (int64_t ix = rx.lo; ix < rx.hi; ++ix) {
            const typename L::F in = L::Load(image + (iy * g.w + ix) * kBlock);
            best = L::Select(in > best, in, best);
          }
        }
        L::Store(out, best);
      }
    }
  }
}

// Each pooled gradient goes to the first maximum of its window in (row,
// column) order, as in MaxPoolBackward: the maxima first, then the first
// pixel holding each.
template <int kBlock>
KT_INLINE void MaxPoolBackwardBlocked(const PoolGeometry& g, const float* __restrict x,
                                      const float* __restrict dy, float* __restrict dx) {
  using L = Lanes<kBlock>;
  const bool overlap = g.stride < g.k;
  // Windows that tile the image write every pixel once; otherwise pixels in
  // no window (or in several) start from zero.
  const bool tiles = Tiles(g);
  for (int64_t b = 0; b < g.n; ++b) {
    const float* image = x + b * g.h * g.w * kBlock;
    float* grad_image = dx + b * g.h * g.w * kBlock;
    if (!tiles) std::fill_n(grad_image, g.h * g.w * kBlock, 0.0f);
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const WindowRange ry = Window(oy, g.stride, g.pad_h, g.k, g.h);
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const WindowRange rx = Window(ox, g.stride, g.pad_w, g.k, g.w);
        if (ry.lo >= ry.hi || rx.lo >= rx.hi) continue;
        const typename L::F grad = L::Load(dy + ((b * g.oh + oy) * g.ow + ox) * kBlock);
        typename L::F best = L::Load(image + (ry.lo * g.w + rx.lo) * kBlock);
        for (int64_t iy = ry.lo; iy < ry.hi; ++iy) {
          for (int64_t ix = rx.lo; ix < rx.hi; ++ix) {
            const typename L::F in = L::Load(image + (iy * g.w + ix) * kBlock);
            best = L::Select(in > best, in, best);
          }
        }
        typename L::I taken{};
        for (int64_t iy = ry.lo; iy < ry.hi; ++iy) {
          for (int64_t ix = rx.lo; ix < rx.hi; ++ix) {
            const typename L::F in = L::Load(image + (iy * g.w + ix) * kBlock);
            float* out = grad_image + (iy * g.w + ix) * kBlock;
            const typename L::I hit = (in == best) & ~taken;
            const typename L::F routed = L::Select(hit, grad, typename L::F{});
            L::Store(out, overlap ? L::Load(out) + routed : routed);
            taken |= hit;
          }
        }
      }
    }
  }
}

// MaxPoolBackwardBlocked followed by the activation's gradient, for windows
// that tile the image (each pixel is routed to once): dz = routed dy *
// act'(y), in one pass over the image; `sums` (kBlock floats) accumulates dz
// per lane for the bias gradient. The arithmetic of BiasActivationGradRows,
// element by element.
template <int kBlock, Activation kAct>
KT_INLINE void MaxPoolActivationGradTiled(const PoolGeometry& g, const float* __restrict x,
                                          const float* __restrict dy, const float* __restrict y,
                                          float* __restrict dz, float* __restrict sums) {
  using L = Lanes<kBlock>;
  using F = typename L::F;
  F total = L::Load(sums);
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int64_t y0 = oy * g.k, x0 = ox * g.k;
      const F grad = L::Load(dy + (oy * g.ow + ox) * kBlock);
      F best = L::Load(x + (y0 * g.w + x0) * kBlock);
      for (int64_t iy = y0; iy < y0 + g.k; ++iy) {
        for (int64_t ix = x0; ix < x0 + g.k; ++ix) {
          const F in = L::Load(x + (iy * g.w + ix) * kBlock);
          best = L::Select(in > best, in, best);
        }
      }
      typename L::I taken{};
      for (int64_t iy = y0; iy < y0 + g.k; ++iy) {
        for (int64_t ix = x0; ix < x0 + g.k; ++ix) {
          const int64_t p = (iy * g.w + ix) * kBlock;
          const F in = L::Load(x + p);
          const typename L::I hit = (in == best) & ~taken;
          taken |= hit;
          F d = L::Select(hit, grad, F{});
          const F out = L::Load(y + p);
          if constexpr (kAct == Activation::kRelu) d = L::Select(out > F{}, d, F{});
          if constexpr (kAct == Activation::kTanh) d *= 1.0f - out * out;
          if constexpr (kAct == Activation::kSigmoid) d *= out * (1.0f - out);
          L::Store(dz + p, d);
          total += d;
        }
      }
    }
  }
  L::Store(sums, total);
}

template <int kBlock>
KT_INLINE void MaxPoolActivationGradTiledFor(Activation act, const PoolGeometry& g, const float* x,
                                             const float* dy, const float* y, float* dz,
                                             float* sums) {
  switch (act) {
    case Activation::kLinear:
      return MaxPoolActivationGradTiled<kBlock, Activation::kLinear>(g, x, dy, y, dz, sums);
    case Activation::kRelu:
      return MaxPoolActivationGradTiled<kBlock, Activation::kRelu>(g, x, dy, y, dz, sums);
    case Activation::kTanh:
      return MaxPoolActivationGradTiled<kBlock, Activation::kTanh>(g, x, dy, y, dz, sums);
    case Activation::kSigmoid:
      return MaxPoolActivationGradTiled<kBlock, Activation::kSigmoid>(g, x, dy, y, dz, sums);
  }
}

__attribute__((target("avx512f"))) void MaxPoolActivationGrad16(Activation act,
                                                                const PoolGeometry& g,
                                                                const float* x, const float* dy,
                                                                const float* y, float* dz,
                                                                float* sums) {
  MaxPoolActivationGradTiledFor<16>(act, g, x, dy, y, dz, sums);
}
__attribute__((target("avx2"))) void MaxPoolActivationGrad8(Activation act, const PoolGeometry& g,
                                                            const float* x, const float* dy,
                                                            const float* y, float* dz,
                                                            float* sums) {
  MaxPoolActivationGradTiledFor<8>(act, g, x, dy, y, dz, sums);
}

__attribute__((target("avx512f"))) void MaxPoolForward16(const PoolGeometry& g, const float* x,
                                                         float* y) {
  MaxPoolForwardBlocked<16>(g, x, y);
}
__attribute__((target("avx512f"))) void MaxPoolBackward16(const PoolGeometry& g, const float* x,
                                                          const float* dy, float* dx) {
  MaxPoolBackwardBlocked<16>(g, x, dy, dx);
}
__attribute__((target("avx2"))) void MaxPoolForward8(const PoolGeometry& g, const float* x,
                                                     float* y) {
  MaxPoolForwardBlocked<8>(g, x, y);
}
__attribute__((target("avx2"))) void MaxPoolBackward8(const PoolGeometry& g, const float* x,
                                                      const float* dy, float* dx) {
  MaxPoolBackwardBlocked<8>(g, x, dy, dx);
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

void MaxPoolForwardImages(const PoolGeometry& g, const float* x, float* y) {
  if (g.c == 16 && HasAvx512()) return MaxPoolForward16(g, x, y);
  if (g.c == 8 && HasAvx2()) return MaxPoolForward8(g, x, y);
  MaxPoolForward(g, x, y);
}
void MaxPoolBackwardImages(const PoolGeometry& g, const float* x, const float* dy, float* dx) {
  if (g.c == 16 && HasAvx512()) return MaxPoolBackward16(g, x, dy, dx);
  if (g.c == 8 && HasAvx2()) return MaxPoolBackward8(g, x, dy, dx);
  MaxPoolBackward(g, x, dy, dx);
}

absl::Status MaxPoolKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  if (x.num_elements() == 0 || c.output(0).num_elements() == 0) return RunReference(c);
  absl::StatusOr<PoolGeometry> g = GetPoolGeometry(c, x.shape());
  if (!g.ok()) return g.status();
  absl::StatusOr<BlockedInput> in = ReadBlocked(c, x, kSrcScratch);
  if (!in.ok()) return in.status();
  const Tensor& y = c.output(0);
  OutputBinding out(c, 0, in->Like(y.shape()), NhwcDesc(y.shape()));
  // Each channel block of each image is an NHWC image of `block` channels.
  PoolGeometry blocks = *g;
  blocks.n = g->n * CeilDiv(g->c, in->block);
  blocks.c = in->block;
  const float* src = in->data;
  float* dst = static_cast<float*>(out.data());
  ParallelFor(c, blocks.n, [&](int64_t begin, int64_t end) {
    PoolGeometry part = blocks;
    part.n = end - begin;
    MaxPoolForwardImages(part, src + begin * g->h * g->w * blocks.c,
                         dst + begin * g->oh * g->ow * blocks.c);
  });
  out.Finish();
  return absl::OkStatus();
}

// (input, dy) -> dx, in the input's layout.
absl::Status MaxPoolGradKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  const Tensor& dy = c.input(1);
  if (x.num_elements() == 0 || dy.num_elements() == 0) return RunReference(c);
  absl::StatusOr<PoolGeometry> g = GetPoolGeometry(c, x.shape());
  if (!g.ok()) return g.status();
  absl::StatusOr<BlockedInput> in = ReadBlocked(c, x, kSrcScratch);
  if (!in.ok()) return in.status();
  absl::StatusOr<memory::desc> dy_desc = DescOf(c, dy, NhwcDesc(dy.shape()));
  if (!dy_desc.ok()) return dy_desc.status();
  const float* grad = static_cast<const float*>(
      InLayout(c, *dy_desc, dy.data(), in->Like(dy.shape()), kDiffDstScratch));
  OutputBinding out(c, 0, in->desc, NhwcDesc(x.shape()));
  PoolGeometry blocks = *g;
  blocks.n = g->n * CeilDiv(g->c, in->block);
  blocks.c = in->block;
  const float* src = in->data;
  float* dst = static_cast<float*>(out.data());
  ParallelFor(c, blocks.n, [&](int64_t begin, int64_t end) {
    PoolGeometry part = blocks;
    part.n = end - begin;
    MaxPoolBackwardImages(part, src + begin * g->h * g->w * blocks.c,
                          grad + begin * g->oh * g->ow * blocks.c,
                          dst + begin * g->h * g->w * blocks.c);
  });
  out.Finish();
  return absl::OkStatus();
}

// The bias, zero-padded to whole channel blocks (padding lanes of a
// blocked tensor hold zeros, and must keep them).
const float* PaddedBias(const Tensor& bias, int64_t blocks, int64_t block) {
  const int64_t channels = bias.num_elements();
  if (blocks * block == channels) return bias.data();
  float* padded = static_cast<float*>(Scratch(kBiasScratch, sizeof(float) * blocks * block));
  std::copy_n(bias.data(), channels, padded);
  std::fill(padded + channels, padded + blocks * block, 0.0f);
  return padded;
}

// Zeroes the padding lanes of the last channel block of each image
// (sigmoid(0) is not 0).
void ZeroPadding(float* data, int64_t images, int64_t pixels, int64_t channels, int64_t block) {
  const int64_t blocks = CeilDiv(channels, block), used = channels - (blocks - 1) * block;
  if (used == block) return;
  for (int64_t i = 0; i < images; ++i) {
    float* last = data + (i * blocks + blocks - 1) * pixels * block;
    for (int64_t p = 0; p < pixels; ++p)
      std::fill(last + p * block + used, last + (p + 1) * block, 0.0f);
  }
}

// (x, bias) -> act(x + bias); BiasAdd is the linear case.
absl::Status BiasActivationKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  const Tensor& bias = c.input(1);
  const Activation act = ParseActivation(c.node);
  if (x.rank() != 4 || x.num_elements() == 0) {
    MakeRowMajor(c.output(0));
    if (!x.is_row_major()) return RunReference(c);
    const int64_t cols = x.shape().back(), rows = cols == 0 ? 0 : x.num_elements() / cols;
    float* y = c.output(0).data();
    ParallelFor(c, rows, [&](int64_t begin, int64_t end) {
      BiasActivationRows(act, x.data() + begin * cols, bias.data(), y + begin * cols, end - begin,
                         cols);
    });
    return absl::OkStatus();
  }
  absl::StatusOr<BlockedInput> in = ReadBlocked(c, x, kSrcScratch);
  if (!in.ok()) return in.status();
  OutputBinding out(c, 0, in->desc, NhwcDesc(x.shape()));
  const int64_t channels = x.dim(3), pixels = x.dim(1) * x.dim(2);
  const int64_t blocks = CeilDiv(channels, in->block), block = in->block;
  const float* b = PaddedBias(bias, blocks, block);
  const float* src = in->data;
  float* dst = static_cast<float*>(out.data());
  ParallelFor(c, x.dim(0) * blocks, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      BiasActivationRows(act, src + i * pixels * block, b + (i % blocks) * block,
                         dst + i * pixels * block, pixels, block);
    }
  });
  if (act == Activation::kSigmoid) ZeroPadding(dst, x.dim(0), pixels, channels, block);
  out.Finish();
  return absl::OkStatus();
}

// (dy, y) -> (dz, db), dz in y's layout.
absl::Status BiasActivationGradKernel(KernelContext& c) {
  const Tensor& dy = c.input(0);
  const Tensor& y = c.input(1);
  const Activation act = ParseActivation(c.node);
  Tensor& db = c.output(1);
  MakeRowMajor(db);
  if (y.rank() != 4 || y.num_elements() == 0) return RunReference(c);
  absl::StatusOr<BlockedInput> in = ReadBlocked(c, y, kSrcScratch);
  if (!in.ok()) return in.status();
  absl::StatusOr<memory::desc> dy_desc = DescOf(c, dy, NhwcDesc(dy.shape()));
  if (!dy_desc.ok()) return dy_desc.status();
  const float* grad =
      static_cast<const float*>(InLayout(c, *dy_desc, dy.data(), in->desc, kDiffDstScratch));
  OutputBinding out(c, 0, in->desc, NhwcDesc(y.shape()));
  const int64_t channels = y.dim(3), pixels = y.dim(1) * y.dim(2);
  const int64_t blocks = CeilDiv(channels, in->block), block = in->block;
  const int64_t images = y.dim(0) * blocks;
  const int threads = static_cast<int>(std::min<int64_t>(c.device.num_threads(), images));
  // Per thread: the bias gradient of its images, then summed in order.
  std::vector<float> partial(static_cast<size_t>(std::max(threads, 1) * blocks * block), 0.0f);
  const float* src = in->data;
  float* dst = static_cast<float*>(out.data());
  ParallelFor(c, images, [&](int64_t begin, int64_t end) {
    const int64_t t = threads > 1 ? omp_get_thread_num() : 0;
    float* sums = partial.data() + t * blocks * block;
    std::vector<float> image_sums(static_cast<size_t>(block));
    for (int64_t i = begin; i < end; ++i) {
      BiasActivationGradRows(act, grad + i * pixels * block, src + i * pixels * block,
                             dst + i * pixels * block, image_sums.data(), pixels, block);
      float* s = sums + (i % blocks) * block;
      for (int64_t j = 0; j < block; ++j) s[j] += image_sums[static_cast<size_t>(j)];
    }
  });
  float* out_db = db.data();
  for (int64_t ch = 0; ch < channels; ++ch) {
    float sum = 0.0f;
    for (int t = 0; t < std::max(threads, 1); ++t)
      sum += partial[static_cast<size_t>(t * blocks * block + ch)];
    out_db[ch] = sum;
  }
  out.Finish();
  return absl::OkStatus();
}

// MaxPoolGrad fused with the BiasActivationGrad that reads it (a conv
// layer's activation followed by pooling): inputs (x, pooled dy, y), the
// activation's output y usually being x itself; outputs (dz, db), dz in x's
// layout. Each image's pooled gradient stays in a cache-sized buffer
// instead of going through memory as a tensor of its own.
absl::Status MaxPoolBiasActivationGradKernel(KernelContext& c) {
  const Tensor& x = c.input(0);
  const Tensor& dy = c.input(1);
  const Tensor& y = c.input(2);
  MakeRowMajor(c.output(1));
  if (x.num_elements() == 0 || dy.num_elements() == 0 || x.shape() != y.shape()) {
    return RunReference(c);
  }
  absl::StatusOr<PoolGeometry> g = GetPoolGeometry(c, *c.producer, x.shape());
  if (!g.ok()) return g.status();
  absl::StatusOr<BlockedInput> in = ReadBlocked(c, x, kSrcScratch);
  if (!in.ok()) return in.status();
  absl::StatusOr<memory::desc> dy_desc = DescOf(c, dy, NhwcDesc(dy.shape()));
  absl::StatusOr<memory::desc> y_desc = DescOf(c, y, NhwcDesc(y.shape()));
  if (!dy_desc.ok()) return dy_desc.status();
  if (!y_desc.ok()) return y_desc.status();
  const float* grad = static_cast<const float*>(
      InLayout(c, *dy_desc, dy.data(), in->Like(dy.shape()), kDiffDstScratch));
  const float* out_act =
      static_cast<const float*>(InLayout(c, *y_desc, y.data(), in->desc, kWeightsScratch));
  OutputBinding out(c, 0, in->desc, NhwcDesc(x.shape()));
  const Activation act = ParseActivation(c.node);
  const int64_t channels = x.dim(3), pixels = x.dim(1) * x.dim(2), block = in->block;
  const int64_t blocks = CeilDiv(channels, block), images = x.dim(0) * blocks;
  PoolGeometry one = *g;
  one.n = 1;
  one.c = block;
  const int threads = static_cast<int>(std::min<int64_t>(c.device.num_threads(), images));
  std::vector<float> partial(static_cast<size_t>(std::max(threads, 1) * blocks * block), 0.0f);
  const float* src = in->data;
  float* dst = static_cast<float*>(out.data());
  // One pass per image where the windows tile it and the lanes fit a
  // vector; else the pooled gradient goes through a buffer first.
  const bool one_pass = Tiles(one) && ((block == 16 && HasAvx512()) || (block == 8 && HasAvx2()));
  ParallelFor(c, images, [&](int64_t begin, int64_t end) {
    const int64_t t = threads > 1 ? omp_get_thread_num() : 0;
    float* sums = partial.data() + t * blocks * block;
    if (one_pass) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t at = i * pixels * block;
        float* s = sums + (i % blocks) * block;
        const float* pooled = grad + i * g->oh * g->ow * block;
        if (block == 16) {
          MaxPoolActivationGrad16(act, one, src + at, pooled, out_act + at, dst + at, s);
        } else {
          MaxPoolActivationGrad8(act, one, src + at, pooled, out_act + at, dst + at, s);
        }
      }
      return;
    }
    std::vector<float> routed(static_cast<size_t>(pixels * block));
    std::vector<float> image_sums(static_cast<size_t>(block));
    for (int64_t i = begin; i < end; ++i) {
      MaxPoolBackwardImages(one, src + i * pixels * block, grad + i * g->oh * g->ow * block,
                            routed.data());
      BiasActivationGradRows(act, routed.data(), out_act + i * pixels * block,
                             dst + i * pixels * block, image_sums.data(), pixels, block);
      float* s = sums + (i % blocks) * block;
      for (int64_t j = 0; j < block; ++j) s[j] += image_sums[static_cast<size_t>(j)];
    }
  });
  float* db = c.output(1).data();
  for (int64_t ch = 0; ch < channels; ++ch) {
    float sum = 0.0f;
    for (int t = 0; t < std::max(threads, 1); ++t) {
      sum += partial[static_cast<size_t>(t * blocks * block + ch)];
    }
    db[ch] = sum;
  }
  out.Finish();
  return absl::OkStatus();
}

// Converts oneDNN's exceptions at this one seam, and sets the pool's size.
template <Kernel kKernel>
absl::Status Guarded(KernelContext& c) {
  try {
    UseThreads(c);
    return kKernel(c);
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("node '", c.node.name, "' (", c.node.op,
                                            "): oneDNN: ", e.what(), " (status ",
                                            static_cast<int>(e.status), ")"));
  }
}

}  // namespace

const std::vector<OneDnnKernelDef>& OneDnnKernels() {
  static const auto* kernels = new std::vector<OneDnnKernelDef>{
      {"MatMul", Guarded<MatMulKernel>, false},
      {"Conv2D", Guarded<Conv2DKernel>, true},
      {"Conv2DBackpropInput", Guarded<Conv2DBackpropInputKernel>, true},
      {"Conv2DBackpropFilter", Guarded<Conv2DBackpropFilterKernel>, true},
      {"MaxPool", Guarded<MaxPoolKernel>, true},
      {"MaxPoolGrad", Guarded<MaxPoolGradKernel>, true},
      {"BiasActivation", Guarded<BiasActivationKernel>, true},
      {"BiasAdd", Guarded<BiasActivationKernel>, true},
      {"BiasActivationGrad", Guarded<BiasActivationGradKernel>, true},
  };
  return *kernels;
}

const std::vector<OneDnnFusedKernelDef>& OneDnnFusedKernels() {
  static const auto* kernels = new std::vector<OneDnnFusedKernelDef>{
      {"Conv2D", "BiasActivation", Guarded<Conv2DBiasActivationKernel>, true},
      {"Conv2D", "BiasAdd", Guarded<Conv2DBiasActivationKernel>, true},
      {"MatMul", "BiasActivation", Guarded<MatMulBiasActivationKernel>, false},
      {"MatMul", "BiasAdd", Guarded<MatMulBiasActivationKernel>, false},
      {"MaxPoolGrad", "BiasActivationGrad", Guarded<MaxPoolBiasActivationGradKernel>, true},
  };
  return *kernels;
}

}  // namespace kubetrain::runtime::engine
