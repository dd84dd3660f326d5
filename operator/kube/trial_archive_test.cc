#include "operator/kube/trial_archive.h"

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "operator/kube/controller.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;

v1::HyperparameterOutput Finished(int id, double objective) {
  v1::HyperparameterOutput t;
  t.set_trial_id(std::to_string(id));
  (*t.mutable_hyperparameters())["x"] = std::to_string(id * 3);
  t.set_state(v1::SUCCEEDED);
  t.mutable_final_metric()->set_training_step(100);
  t.mutable_final_metric()->set_objective_value(objective);
  for (int step = 10; step <= 100; step += 10) {
    v1::HyperparameterMetric* m = t.add_all_metrics();
    m->set_training_step(step);
    m->set_objective_value(objective * step / 100);
  }
  return t;
}

std::set<std::string> Ids(const std::vector<v1::HyperparameterOutput>& trials) {
  std::set<std::string> ids;
  for (const auto& t : trials) ids.insert(t.trial_id());
  return ids;
}

TEST(ArchiveFormatTest, FiftyTrialsPerConfigMapByNumber) {
  EXPECT_EQ(ArchiveName("fmnist-hptuning", "1"), "fmnist-hptuning-trials-1");
  EXPECT_EQ(ArchiveName("fmnist-hptuning", "50"), "fmnist-hptuning-trials-1");
  EXPECT_EQ(ArchiveName("fmnist-hptuning", "51"), "fmnist-hptuning-trials-2");
  EXPECT_EQ(ArchiveName("fmnist-hptuning", "150"), "fmnist-hptuning-trials-3");
  EXPECT_EQ(ArchiveName("j", "odd"), "j-trials-0");
  EXPECT_EQ(ArchiveKey("7"), "trial-7.json");

  v1::TrainingJob job;
  job.mutable_metadata()->set_name("fmnist_hptuning");
  job.mutable_metadata()->set_uid("uid-1");
  json cm = NewArchive(job, "ns1", "fmnist-hptuning-trials-1");
  EXPECT_EQ(cm["metadata"]["labels"]["kubetrain.io/job-name"], "fmnist-hptuning");
  EXPECT_EQ(cm["metadata"]["labels"][kLabelArchivedTrials], "true");
  EXPECT_EQ(cm["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(cm["metadata"]["ownerReferences"][0]["kind"], "TrainingJob");
  AddToArchive(cm, Finished(7, 0.8804));
  AddToArchive(cm, Finished(8, 0.5));
  cm["data"]["trial-9.json"] = "not json";
  cm["data"]["notes"] = "someone's note";  // not a trial key: ignored
  size_t skipped = 0;
  std::vector<v1::HyperparameterOutput> trials = TrialsInArchive(cm, &skipped);
  EXPECT_EQ(skipped, 1u);
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].trial_id(), "7");
  EXPECT_EQ(trials[0].final_metric().objective_value(), 0.8804);
  EXPECT_EQ(trials[0].all_metrics_size(), 10);
  EXPECT_EQ(trials[0].hyperparameters().at("x"), "21");
}

class TrialArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = *FakeApiServer::Start();
    client_ = testing::FakeServerClient(server_->url());
    auto created =
        server_->Create("trainingjobs", "ns1", testing::TuningJobObject("study", 150, 5));
    ASSERT_TRUE(created.ok()) << created.status();
    auto job = JobFromObject(*created);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
  v1::TrainingJob job_;
};

TEST_F(TrialArchiveTest, StoredTrialsAreReadByTheNextOperatorAndGoWithTheJob) {
  TrialArchive archive(client_.get(), "ns1");
  archive.Start();
  ASSERT_TRUE(archive.WaitForSync(absl::Seconds(30)));
  std::vector<v1::HyperparameterOutput> first, second;
  for (int id = 1; id <= 60; ++id) first.push_back(Finished(id, id / 100.0));
  for (int id = 61; id <= 120; ++id) second.push_back(Finished(id, id / 100.0));
  ASSERT_TRUE(archive.Archive(job_, first).ok());
  ASSERT_TRUE(archive.Archive(job_, second).ok());
  // At once (what it wrote), before its cache has seen the writes.
  auto now = archive.Trials(job_, 120);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->size(), 120u);

  // Three ConfigMaps that kubectl finds by the job's label.
  std::vector<json> maps = server_->List("configmaps", "ns1");
  std::map<std::string, size_t> sizes;
  for (const json& cm : maps) {
    EXPECT_EQ(cm["metadata"]["labels"]["kubetrain.io/job-name"], "study");
    EXPECT_EQ(cm["metadata"]["ownerReferences"][0]["uid"], job_.metadata().uid());
    sizes[cm["metadata"]["name"]] = cm["data"].size();
  }
  EXPECT_EQ(sizes, (std::map<std::string, size_t>{
                       {"study-trials-1", 50}, {"study-trials-2", 50}, {"study-trials-3", 20}}));

  // Another operator (a restart, a new leader) reads them all from its cache.
  TrialArchive restarted(client_.get(), "ns1");
  restarted.Start();
  ASSERT_TRUE(restarted.WaitForSync(absl::Seconds(30)));
  server_->ResetRequestCounts();
  auto read = restarted.Trials(job_, 120);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 120u);
  EXPECT_EQ(server_->RequestCounts()["list configmaps"], 0);
  for (const v1::HyperparameterOutput& t : *read) {
    if (t.trial_id() == "77") {
      EXPECT_EQ(t.final_metric().objective_value(), 0.77);
    }
  }

  // The garbage collector deletes them with the job.
  ASSERT_TRUE(server_->Delete("trainingjobs", "ns1", "study").ok());
  EXPECT_EQ(server_->Count("configmaps"), 0u);
}

TEST_F(TrialArchiveTest, ACacheBehindTheServerIsNotTrusted) {
  TrialArchive writer(client_.get(), "ns1");
  std::vector<v1::HyperparameterOutput> trials;
  for (int id = 1; id <= 30; ++id) trials.push_back(Finished(id, 0.5));
  ASSERT_TRUE(writer.Archive(job_, trials).ok());

  // A reader whose cache has seen none of it (never started: as behind as a
  // cache can be) asks the server when status says more were archived.
  TrialArchive lagging(client_.get(), "ns1");
  auto read = lagging.Trials(job_, 30);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 30u);
  auto none_expected = lagging.Trials(job_, 0);
  ASSERT_TRUE(none_expected.ok());
  EXPECT_TRUE(none_expected->empty());
}

TEST_F(TrialArchiveTest, AnEarlierJobOfTheSameNameIsNeitherReadNorWritten) {
  TrialArchive archive(client_.get(), "ns1");
  v1::TrainingJob earlier = job_;
  earlier.mutable_metadata()->set_uid("uid-of-an-earlier-study");
  json leftover = NewArchive(earlier, "ns1", "study-trials-1");
  AddToArchive(leftover, Finished(3, 0.9));
  ASSERT_TRUE(server_->Create("configmaps", "ns1", leftover).ok());
  archive.Start();
  ASSERT_TRUE(archive.WaitForSync(absl::Seconds(30)));

  auto read = archive.Trials(job_, 0);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->empty());
  absl::Status s = archive.Archive(job_, {Finished(4, 0.1)});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("ConfigMap ns1/study-trials-1 belongs to an earlier job"),
            std::string::npos)
      << s;
  EXPECT_EQ(Ids(TrialsInArchive(*server_->Get("configmaps", "ns1", "study-trials-1"))),
            (std::set<std::string>{"3"}));
  // Trials of another chunk go to their own ConfigMap meanwhile.
  EXPECT_TRUE(archive.Archive(job_, {Finished(51, 0.1)}).ok());
}

TEST_F(TrialArchiveTest, AFailedWriteIsAnErrorNamingTheConfigMap) {
  TrialArchive archive(client_.get(), "ns1");
  server_->FailNextRequests(1, 503);
  absl::Status s = archive.Archive(job_, {Finished(1, 0.5)});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("study-trials-1"), std::string::npos) << s;
  EXPECT_TRUE(archive.Archive(job_, {Finished(1, 0.5)}).ok());
}

}  // namespace
}  // namespace kubetrain::kube
