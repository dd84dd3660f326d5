#pragma once

#include <map>
#include <string>

#include "trainer-runtime/engine/device.h"

namespace kubetrain::runtime::cuda {

// The CUDA kernel table, op name -> kernel: every op the CPU device has.
// Kernels expect KernelContext::device to be a CudaDevice (the only device
// that registers them) and every tensor in its memory; they queue work on
// the device's compute stream and return without waiting, except the
// label-checking ops (SoftmaxCrossEntropy, Accuracy), which wait to report
// a bad label as InvalidArgument naming the node, the example and the value.
const std::map<std::string, engine::Kernel, std::less<>>& CudaKernelTable();

}  // namespace kubetrain::runtime::cuda
