#include "operator/kube/study_store.h"

#include "gtest/gtest.h"

namespace kubetrain::kube {
namespace {

TEST(InMemoryStudyStoreTest, KeepsTheLatestReportsPerTrialAndTellsTheListener) {
  InMemoryStudyStore store;
  int told = 0;
  store.SetListener([&](const std::string& uid) {
    EXPECT_EQ(uid, "uid-1");
    ++told;
  });
  const int64_t total = InMemoryStudyStore::kMaxReportsPerTrial + 5;
  for (int64_t step = 0; step < total; ++step) {
    store.Report("uid-1", "1", core::MetricReport{step, {{"accuracy", 0.5}}});
  }
  store.Report("uid-1", "2", core::MetricReport{7, {{"accuracy", 0.6}}});
  EXPECT_EQ(told, total + 1);
  auto metrics = store.TrialMetrics("uid-1");
  ASSERT_EQ(metrics.at("1").size(), InMemoryStudyStore::kMaxReportsPerTrial);
  EXPECT_EQ(metrics.at("1").front().step, 5);
  EXPECT_EQ(metrics.at("1").back().step, total - 1);
  EXPECT_EQ(metrics.at("2").size(), 1u);
  store.ForgetJob("uid-1");
  EXPECT_TRUE(store.TrialMetrics("uid-1").empty());
}

}  // namespace
}  // namespace kubetrain::kube
