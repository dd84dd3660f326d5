// The op lists of op_list.h against what the op table and the CPU device
// hold. (The CUDA device's table: cuda/cuda_kernel_table_test.cc.)
#include "trainer-runtime/engine/op_list.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer-runtime/engine/device.h"
#include "trainer-runtime/engine/op_registry.h"

namespace kubetrain::runtime::engine {
namespace {

#define KUBETRAIN_OP_NAME(name, ...) #name,
const std::vector<std::string> kGraphKernelOps = {KUBETRAIN_KERNEL_OPS(KUBETRAIN_OP_NAME)};
const std::vector<std::string> kUpdateOps = {KUBETRAIN_UPDATE_OPS(KUBETRAIN_OP_NAME)};
const std::vector<std::string> kSourceOps = {KUBETRAIN_SOURCE_OPS(KUBETRAIN_OP_NAME)};
const std::vector<std::string> kViewOps = {KUBETRAIN_VIEW_OPS(KUBETRAIN_OP_NAME)};
#undef KUBETRAIN_OP_NAME

TEST(OpListTest, EveryOpWithAKernelHasOneOnTheCpuDevice) {
  CpuDevice cpu(1);
  std::vector<std::string> with_kernel = kGraphKernelOps;
  with_kernel.insert(with_kernel.end(), kUpdateOps.begin(), kUpdateOps.end());
  for (const std::string& op : with_kernel) {
    EXPECT_EQ(CpuKernelTable().count(op), 1u) << op;
    EXPECT_NE(cpu.FindKernel(op), nullptr) << op;
  }
  // And no kernel for an op the lists do not name.
  EXPECT_EQ(CpuKernelTable().size(), with_kernel.size());
}

TEST(OpListTest, TheOpTableHoldsEveryListedOpAndSourcesAndViewsRunNoKernel) {
  CpuDevice cpu(1);
  for (const std::string& op : kGraphKernelOps) {
    const OpDef* def = FindOpDef(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_FALSE(def->is_source) << op;
    EXPECT_FALSE(def->is_view) << op;
  }
  for (const std::string& op : kSourceOps) {
    const OpDef* def = FindOpDef(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_TRUE(def->is_source) << op;
    EXPECT_EQ(cpu.FindKernel(op), nullptr) << op;
  }
  for (const std::string& op : kViewOps) {
    const OpDef* def = FindOpDef(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_TRUE(def->is_view) << op;
    EXPECT_EQ(cpu.FindKernel(op), nullptr) << op;
  }
  // The optimizers' updates run as kernels outside the op table.
  for (const std::string& op : kUpdateOps) EXPECT_EQ(FindOpDef(op), nullptr) << op;
}

}  // namespace
}  // namespace kubetrain::runtime::engine
