#include "operator/kube/rate_limiter.h"

#include "gtest/gtest.h"

namespace kubetrain::kube {
namespace {

TEST(TokenBucketTest, BurstThenQps) {
  TokenBucket bucket(/*qps=*/10, /*burst=*/3);
  absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_EQ(bucket.Reserve(t0), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t0), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t0), absl::ZeroDuration());
  // The burst is spent: the next callers queue up 100 ms apart.
  EXPECT_EQ(bucket.Reserve(t0), absl::Milliseconds(100));
  EXPECT_EQ(bucket.Reserve(t0), absl::Milliseconds(200));
  // One second later the debt (2 tokens) is repaid and 8 more accrued, capped at the burst.
  absl::Time t1 = t0 + absl::Seconds(1);
  EXPECT_EQ(bucket.Reserve(t1), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t1), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(t1), absl::ZeroDuration());
  EXPECT_GT(bucket.Reserve(t1), absl::ZeroDuration());
}

TEST(TokenBucketTest, ZeroQpsIsUnlimited) {
  TokenBucket bucket(0, 1);
  absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(bucket.Reserve(t0), absl::ZeroDuration());
}

}  // namespace
}  // namespace kubetrain::kube
