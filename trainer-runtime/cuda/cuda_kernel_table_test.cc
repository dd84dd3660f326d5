// The CUDA kernel table against op_list.h: every op with a kernel has one on
// the CUDA device too. Needs no GPU (the table is only function pointers),
// so it runs wherever the CUDA component is built.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer-runtime/cuda/cuda_kernels.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/op_list.h"

namespace kubetrain::runtime::cuda {
namespace {

TEST(CudaKernelTableTest, EveryOpWithAKernelHasACudaKernel) {
#define KUBETRAIN_OP_NAME(name, ...) #name,
  const std::vector<std::string> with_kernel = {KUBETRAIN_KERNEL_OPS(KUBETRAIN_OP_NAME)
                                                    KUBETRAIN_UPDATE_OPS(KUBETRAIN_OP_NAME)};
#undef KUBETRAIN_OP_NAME
  const auto& table = CudaKernelTable();
  for (const std::string& op : with_kernel) {
    auto it = table.find(op);
    ASSERT_NE(it, table.end()) << op;
    EXPECT_NE(it->second, nullptr) << op;
  }
  EXPECT_EQ(table.size(), with_kernel.size());
  // The same ops as the CPU device.
  for (const auto& [op, kernel] : engine::CpuKernelTable()) EXPECT_EQ(table.count(op), 1u) << op;
}

}  // namespace
}  // namespace kubetrain::runtime::cuda
