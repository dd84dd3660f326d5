#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::runtime::engine {

// Dimensions of a tensor, outermost first. A scalar has an empty shape.
using Shape = std::vector<int64_t>;

// Product of the dimensions (1 for a scalar).
int64_t NumElements(const Shape& shape);
// "[128, 784]".
std::string ShapeString(const Shape& shape);
// Row-major strides, in elements.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

enum class DeviceType { kCpu, kCuda };

// Allocates raw device memory. Implementations must be thread-safe.
class Allocator {
 public:
  // Every allocation is aligned to kAlignment bytes, so that SIMD loads and
  // BLAS panels never straddle cache lines.
  static constexpr size_t kAlignment = 64;
  virtual ~Allocator() = default;
  virtual DeviceType device_type() const = 0;
  // Never returns null for bytes > 0; throws std::bad_alloc when memory is
  // exhausted (as operator new does).
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Deallocate(void* ptr) = 0;
};

// The process-wide host (CPU) allocator. Never null, lives forever.
Allocator* HostAllocator();

// One allocation, freed when the last tensor referring to it goes away. A
// buffer either owns memory from an Allocator or wraps memory kept alive by
// `keepalive` (the wrapped memory need not be aligned).
class Buffer {
 public:
  Buffer(Allocator* allocator, size_t bytes);
  Buffer(void* data, size_t bytes, DeviceType device, std::shared_ptr<void> keepalive);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  DeviceType device_type() const { return device_; }

 private:
  Allocator* allocator_ = nullptr;  // null when wrapping
  void* data_ = nullptr;
  size_t size_ = 0;
  DeviceType device_;
  std::shared_ptr<void> keepalive_;
};

// How a tensor's elements lie in its buffer when they are not row-major: a
// device's own layout (oneDNN's channel-blocked nChw16c, for one), defined
// and read only by that device's kernels. Such a tensor only ever passes
// between kernels that asked for it (see KernelContext::MayKeepDeviceLayout):
// feeds, fetches, variables and views are always row-major.
class TensorLayout {
 public:
  virtual ~TensorLayout() = default;
};

// A float32 tensor: a shape, row-major strides and a reference-counted
// buffer. Copying a Tensor copies the reference, not the data (as in
// TensorFlow); Clone() copies the data. A default-constructed Tensor is
// empty (valid() is false). Not thread-safe for concurrent writes to the
// same data; distinct tensors may be used from distinct threads.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Shape shape, std::shared_ptr<Buffer> buffer, int64_t offset = 0);

  // Uninitialised tensor in host memory.
  static Tensor Host(const Shape& shape);
  static Tensor Zeros(const Shape& shape);
  static Tensor Filled(const Shape& shape, float value);
  static Tensor Scalar(float value);
  // Copies `values` (which must hold NumElements(shape) floats; otherwise an
  // InvalidArgument error).
  static absl::StatusOr<Tensor> FromVector(const Shape& shape, const std::vector<float>& values);
  // Wraps host memory without copying; `keepalive` keeps it valid.
  static Tensor WrapHost(const Shape& shape, float* data, std::shared_ptr<void> keepalive);

  bool valid() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i)]; }
  int64_t num_elements() const { return num_elements_; }
  DeviceType device_type() const;
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  float* data() const;
  // Flat element access for host tensors (tests, small bookkeeping).
  float at(int64_t i) const { return data()[i]; }
  std::vector<float> ToVector() const;

  // Null for row-major (the shape's strides); else the device layout the
  // buffer holds, which may be larger than NumElements(shape) floats.
  const std::shared_ptr<const TensorLayout>& layout() const { return layout_; }
  bool is_row_major() const { return layout_ == nullptr; }
  // The same shape and buffer, described by `layout` (null: row-major).
  Tensor WithLayout(std::shared_ptr<const TensorLayout> layout) const;

  // A view with another shape of the same element count (no copy).
  // InvalidArgument for a tensor in a device layout.
  absl::StatusOr<Tensor> Reshaped(const Shape& shape) const;
  // A deep copy in host memory, of a row-major tensor in host memory (a
  // device tensor goes through Device::ToHost instead).
  Tensor Clone() const;
  // True when both point at the same storage and shape.
  bool SharesStorageWith(const Tensor& other) const { return buffer_ == other.buffer_; }

 private:
  Shape shape_;
  std::vector<int64_t> strides_;
  int64_t num_elements_ = 0;
  std::shared_ptr<Buffer> buffer_;
  int64_t offset_ = 0;  // in elements
  std::shared_ptr<const TensorLayout> layout_;
};

}  // namespace kubetrain::runtime::engine
