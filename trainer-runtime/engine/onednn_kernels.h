#pragma once

// The CPU device's oneDNN kernels (CpuKernels::kOneDnn), built only when
// libdnnl-dev is found. Internal to the engine: CpuDevice registers them
// over the reference table, and nothing else includes this header.

#include <memory>
#include <string>
#include <vector>

#include "trainer-runtime/engine/device.h"

namespace kubetrain::runtime::engine {

// oneDNN state of one CpuDevice: the primitives it has created, by shape
// and attributes, so a training step creates none once shapes are stable.
// Thread-safe: lookups lock; primitives run with caller-owned scratch
// memory, so one primitive may run on several threads at once.
std::shared_ptr<OneDnnContext> NewOneDnnContext();

struct OneDnnKernelDef {
  std::string op;
  Kernel kernel;
  bool takes_device_layouts;
};
struct OneDnnFusedKernelDef {
  std::string producer;
  std::string consumer;
  Kernel kernel;
  bool takes_device_layouts;
};

// The kernels that replace reference ones on the kOneDnn path.
const std::vector<OneDnnKernelDef>& OneDnnKernels();
// Producer/consumer pairs run as one kernel on the kOneDnn path.
const std::vector<OneDnnFusedKernelDef>& OneDnnFusedKernels();

}  // namespace kubetrain::runtime::engine
