#include "operator/kube/informer.h"

#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;

json Pod(const std::string& name, const std::string& job, const std::string& owner = "kubetrain") {
  return {{"metadata",
           {{"name", name},
            {"labels", {{"kubetrain.io/job-name", job}, {"app.kubernetes.io/managed-by", owner}}}}},
          {"spec", json::object()}};
}

// Records handler calls; lets a test wait (without sleeping) for a condition
// on what the informer delivered.
class Recorder {
 public:
  InformerHandlers Handlers() {
    return InformerHandlers{
        .on_add = [this](const ObjectPtr& o) { Note("add", *o); },
        .on_update = [this](const ObjectPtr&, const ObjectPtr& o) { Note("update", *o); },
        .on_delete = [this](const ObjectPtr& o) { Note("delete", *o); }};
  }
  bool WaitFor(const std::string& entry, absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return entries_.count(entry) > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
  }
  bool Seen(const std::string& entry) {
    absl::MutexLock lock(&mu_);
    return entries_.count(entry) > 0;
  }

 private:
  void Note(const std::string& what, const json& o) {
    absl::MutexLock lock(&mu_);
    // Updates are told apart by the pod phase they carry.
    std::string phase =
        what == "update" && o.contains("status") ? o["status"].value("phase", "") : "";
    entries_.insert(absl::StrCat(what, " ", o["metadata"]["name"].get<std::string>(),
                                 phase.empty() ? "" : " ", phase));
  }
  absl::Mutex mu_;
  std::multiset<std::string> entries_ ABSL_GUARDED_BY(mu_);
};

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServer::Options options;
    options.bookmark_interval = absl::Milliseconds(100);
    server_ = *FakeApiServer::Start(options);
    client_ = testing::FakeServerClient(server_->url());
  }
  std::unique_ptr<Informer> MakeInformer(Recorder& recorder) {
    InformerOptions options{.resource = kPods,
                            .ns = "ns1",
                            .label_selector = "app.kubernetes.io/managed-by=kubetrain",
                            .index_label = "kubetrain.io/job-name",
                            .page_size = 2,
                            .min_backoff = absl::Milliseconds(10),
                            .max_backoff = absl::Milliseconds(200)};
    return std::make_unique<Informer>(client_.get(), options, recorder.Handlers());
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
};

TEST_F(InformerTest, ListsPagedThenWatchesOnlyItsOwnObjects) {
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(server_->Create("pods", "ns1", Pod(absl::StrCat("p", i), "j1")).ok());
  ASSERT_TRUE(server_->Create("pods", "ns1", Pod("foreign", "j1", "someone-else")).ok());
  Recorder rec;
  auto informer = MakeInformer(rec);
  informer->Start();
  ASSERT_TRUE(informer->WaitForSync(absl::Seconds(20)));
  EXPECT_EQ(informer->cache().size(), 5u);
  EXPECT_TRUE(rec.Seen("add p4"));
  EXPECT_EQ(informer->cache().ByIndex("ns1", "j1").size(), 5u);

  ASSERT_TRUE(server_->Create("pods", "ns1", Pod("p5", "j2")).ok());
  ASSERT_TRUE(
      server_->MergePatch("pods", "ns1", "p0", {{"status", {{"phase", "Running"}}}}, "status")
          .ok());
  ASSERT_TRUE(server_->Delete("pods", "ns1", "p1").ok());
  ASSERT_TRUE(rec.WaitFor("delete p1"));
  EXPECT_TRUE(rec.Seen("add p5"));
  EXPECT_TRUE(rec.Seen("update p0 Running"));
  EXPECT_EQ(informer->cache().size(), 5u);
  EXPECT_EQ(informer->cache().Get("ns1/p1"), nullptr);
  EXPECT_EQ(informer->cache().ByIndex("ns1", "j2").size(), 1u);
  EXPECT_EQ((*informer->cache().Get("ns1/p0"))["status"]["phase"], "Running");
  EXPECT_EQ(informer->list_count(), 1) << "a healthy watch needs no relist";
  informer->Stop();
}

TEST_F(InformerTest, DroppedWatchResumesWithoutRelisting) {
  Recorder rec;
  auto informer = MakeInformer(rec);
  informer->Start();
  ASSERT_TRUE(informer->WaitForSync(absl::Seconds(20)));
  ASSERT_TRUE(server_->Create("pods", "ns1", Pod("a", "j1")).ok());
  ASSERT_TRUE(rec.WaitFor("add a"));
  server_->DropWatches();
  ASSERT_TRUE(server_->Create("pods", "ns1", Pod("b", "j1")).ok());  // while reconnecting
  ASSERT_TRUE(rec.WaitFor("add b"));
  EXPECT_EQ(informer->list_count(), 1);
  EXPECT_GE(informer->watch_count(), 2);
}

TEST_F(InformerTest, GoneRelistsAndDeliversWhatWasMissed) {
  ASSERT_TRUE(server_->Create("pods", "ns1", Pod("old", "j1")).ok());
  Recorder rec;
  auto informer = MakeInformer(rec);
  informer->Start();
  ASSERT_TRUE(informer->WaitForSync(absl::Seconds(20)));
  // Make the watch fail and lose history while changes happen.
  server_->FailNextRequests(3, 503);
  server_->DropWatches();
  ASSERT_TRUE(server_->Delete("pods", "ns1", "old").ok());
  ASSERT_TRUE(server_->Create("pods", "ns1", Pod("new", "j1")).ok());
  server_->CompactHistory();
  ASSERT_TRUE(rec.WaitFor("delete old"));
  ASSERT_TRUE(rec.WaitFor("add new"));
  EXPECT_GE(informer->list_count(), 2);
  EXPECT_EQ(informer->cache().Get("ns1/old"), nullptr);
  EXPECT_NE(informer->cache().Get("ns1/new"), nullptr);
}

TEST_F(InformerTest, RetriesTheFirstListAfterErrors) {
  server_->FailNextRequests(3, 500);
  Recorder rec;
  auto informer = MakeInformer(rec);
  informer->Start();
  ASSERT_TRUE(informer->WaitForSync(absl::Seconds(20)));
  EXPECT_GE(informer->list_count(), 2);
}

TEST_F(InformerTest, StopUnblocksAnIdleWatch) {
  Recorder rec;
  auto informer = MakeInformer(rec);
  informer->Start();
  ASSERT_TRUE(informer->WaitForSync(absl::Seconds(20)));
  informer->Stop();  // must return although no event is coming
  EXPECT_TRUE(informer->HasSynced());
}

}  // namespace
}  // namespace kubetrain::kube
