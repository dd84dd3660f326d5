#include "trainer-runtime/engine/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kubetrain::runtime::engine {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

namespace {

class HostAllocatorImpl final : public Allocator {
 public:
  DeviceType device_type() const override { return DeviceType::kCpu; }
  void* Allocate(size_t bytes) override {
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void Deallocate(void* ptr) override { std::free(ptr); }
};

}  // namespace

Allocator* HostAllocator() {
  static HostAllocatorImpl* allocator = new HostAllocatorImpl();
  return allocator;
}

Buffer::Buffer(Allocator* allocator, size_t bytes)
    : allocator_(allocator), size_(bytes), device_(allocator->device_type()) {
  data_ = allocator_->Allocate(bytes);
}

Buffer::Buffer(void* data, size_t bytes, DeviceType device, std::shared_ptr<void> keepalive)
    : data_(data), size_(bytes), device_(device), keepalive_(std::move(keepalive)) {}

Buffer::~Buffer() {
  if (allocator_ != nullptr) allocator_->Deallocate(data_);
}

Tensor::Tensor(Shape shape, std::shared_ptr<Buffer> buffer, int64_t offset)
    : shape_(std::move(shape)),
      strides_(RowMajorStrides(shape_)),
      num_elements_(NumElements(shape_)),
      buffer_(std::move(buffer)),
      offset_(offset) {}

Tensor Tensor::Host(const Shape& shape) {
  auto buffer = std::make_shared<Buffer>(HostAllocator(),
                                         static_cast<size_t>(NumElements(shape)) * sizeof(float));
  return Tensor(shape, std::move(buffer));
}

Tensor Tensor::Zeros(const Shape& shape) { return Filled(shape, 0.0f); }

Tensor Tensor::Filled(const Shape& shape, float value) {
  Tensor t = Host(shape);
  float* p = t.data();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = value;
  return t;
}

Tensor Tensor::Scalar(float value) { return Filled({}, value); }

absl::StatusOr<Tensor> Tensor::FromVector(const Shape& shape, const std::vector<float>& values) {
  if (static_cast<int64_t>(values.size()) != NumElements(shape)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of shape ", ShapeString(shape),
                                                   " needs ", NumElements(shape), " values, got ",
                                                   values.size()));
  }
  Tensor t = Host(shape);
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::WrapHost(const Shape& shape, float* data, std::shared_ptr<void> keepalive) {
  auto buffer =
      std::make_shared<Buffer>(data, static_cast<size_t>(NumElements(shape)) * sizeof(float),
                               DeviceType::kCpu, std::move(keepalive));
  return Tensor(shape, std::move(buffer));
}

DeviceType Tensor::device_type() const {
  return buffer_ ? buffer_->device_type() : DeviceType::kCpu;
}

float* Tensor::data() const {
  return buffer_ ? static_cast<float*>(buffer_->data()) + offset_ : nullptr;
}

std::vector<float> Tensor::ToVector() const {
  const float* p = data();
  return p == nullptr ? std::vector<float>() : std::vector<float>(p, p + num_elements_);
}

Tensor Tensor::WithLayout(std::shared_ptr<const TensorLayout> layout) const {
  Tensor t = *this;
  t.layout_ = std::move(layout);
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshaped(const Shape& shape) const {
  if (!is_row_major()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot reshape a tensor of shape ", ShapeString(shape_), " held in a device layout"));
  }
  if (NumElements(shape) != num_elements_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeString(shape_), " (",
                                                   num_elements_, " elements) to ",
                                                   ShapeString(shape)));
  }
  return Tensor(shape, buffer_, offset_);
}

Tensor Tensor::Clone() const {
  Tensor t = Host(shape_);
  if (num_elements_ > 0)
    std::memcpy(t.data(), data(), static_cast<size_t>(num_elements_) * sizeof(float));
  return t;
}

}  // namespace kubetrain::runtime::engine
