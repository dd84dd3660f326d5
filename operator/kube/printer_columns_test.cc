// What `kubectl get tj` shows: the generated CRD's printer columns, served by
// the fake API server in the Table format kubectl asks for, over the status
// the real controller writes while a study runs.
#define _TURN_OFF_PLATFORM_STRING  // cpprest's U() macro breaks gtest
#include <cpprest/http_client.h>

#include <map>
#include <memory>
#include <string>

#include "api/crd.h"
#include "gtest/gtest.h"
#include "operator/kube/controller.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;
using testing::TerminatedPodStatus;
using testing::TuningJobObject;

// kubectl get's Accept header (kubectl 1.32), Table first, JSON as fallback.
constexpr char kKubectlAccept[] =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta."
    "k8s.io,application/json";

class PrinterColumnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServer::Options server_options;
    server_options.bookmark_interval = absl::Milliseconds(200);
    server_ = *FakeApiServer::Start(server_options);
    ASSERT_TRUE(server_->ServeCrd(api::TrainingJobCrd()).ok());
    client_ = testing::FakeServerClient(server_->url());
    ControllerOptions options;
    options.ns = "ns1";
    options.workers = 2;
    controller_ = std::make_unique<Controller>(client_.get(), options, &studies_);
    studies_.SetListener([this](const std::string& uid) { controller_->EnqueueByUid(uid); });
    ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  }
  void TearDown() override { controller_->Stop(); }

  // GET as kubectl does; the answer's body.
  json Get(const std::string& path, const std::string& accept = kKubectlAccept) {
    web::http::client::http_client http(server_->url());
    web::http::http_request request(web::http::methods::GET);
    request.set_request_uri(path);
    request.headers().add("Accept", accept);
    web::http::http_response response = http.request(request).get();
    last_code_ = response.status_code();
    return json::parse(response.extract_utf8string(true).get());
  }

  // The row of `job` in the list's Table, cell by column name.
  std::map<std::string, json> Row(const std::string& job) {
    const json table = Get("/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs");
    EXPECT_EQ(table.value("kind", ""), "Table") << table.dump();
    std::map<std::string, json> row;
    for (const json& r : table.value("rows", json::array())) {
      if (r["cells"][0] != job) continue;
      for (size_t i = 0; i < table["columnDefinitions"].size(); ++i) {
        row[table["columnDefinitions"][i]["name"]] = r["cells"][i];
      }
    }
    return row;
  }

  std::string Status(const std::string& job, const char* field) {
    auto object = server_->Get("trainingjobs", "ns1", job);
    if (!object.ok() || !object->contains("status")) return "";
    return (*object)["status"].value(field, "");
  }

  std::string Uid(const std::string& job) {
    return (*server_->Get("trainingjobs", "ns1", job))["metadata"]["uid"];
  }

  // Trial `id`'s master reports `objective` and exits 0.
  void FinishTrial(const std::string& job, const std::string& id, double objective) {
    const std::string pod = job + "-t" + id + "-master-0";
    ASSERT_TRUE(server_->WaitUntil([&] { return server_->Get("pods", "ns1", pod).ok(); })) << pod;
    studies_.Report(Uid(job), id, core::MetricReport{100, {{"accuracy", objective}}});
    ASSERT_TRUE(
        server_->MergePatch("pods", "ns1", pod, TerminatedPodStatus("Succeeded", 0), "status")
            .ok());
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
  InMemoryStudyStore studies_;
  std::unique_ptr<Controller> controller_;
  int last_code_ = 0;
};

TEST_F(PrinterColumnsTest, TrialsAndBestFollowAStudyFromNoneToAll) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", TuningJobObject("sweep", 3, 1)).ok());

  // Before any trial completes: 0/3, no best yet.
  ASSERT_TRUE(server_->WaitUntil([&] { return Status("sweep", "trialProgress") == "0/3"; }));
  std::map<std::string, json> row = Row("sweep");
  EXPECT_EQ(row["Trials"], "0/3");
  EXPECT_TRUE(row["Best"].is_null()) << row["Best"];
  EXPECT_TRUE(row["State"] == "QUEUED" || row["State"] == "PREPARING") << row["State"];
  EXPECT_TRUE(row["Age"].is_string() && !row["Age"].get<std::string>().empty());

  // Some: one trial of three.
  FinishTrial("sweep", "1", 0.5);
  ASSERT_TRUE(server_->WaitUntil([&] { return Status("sweep", "trialProgress") == "1/3"; }));
  row = Row("sweep");
  EXPECT_EQ(row["Trials"], "1/3");
  EXPECT_EQ(row["Best"], 0.5);

  // All: the best of the three, and the study's end state.
  FinishTrial("sweep", "2", 0.875);
  ASSERT_TRUE(server_->WaitUntil([&] { return Status("sweep", "trialProgress") == "2/3"; }));
  FinishTrial("sweep", "3", 0.25);
  ASSERT_TRUE(server_->WaitUntil([&] { return Status("sweep", "state") == "SUCCEEDED"; }));
  row = Row("sweep");
  EXPECT_EQ(row["Trials"], "3/3");
  EXPECT_EQ(row["Best"], 0.875);
  EXPECT_EQ(row["State"], "SUCCEEDED");
}

TEST_F(PrinterColumnsTest, AJobThatDoesNotTuneLeavesTrialsAndBestEmpty) {
  json job = TuningJobObject("plain", 1, 1);
  job["spec"]["trainingInput"].erase("hyperparameters");
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", job).ok());
  ASSERT_TRUE(server_->WaitUntil([&] { return Status("plain", "state") == "PREPARING"; }));
  std::map<std::string, json> row = Row("plain");
  EXPECT_EQ(row["State"], "PREPARING");
  EXPECT_TRUE(row["Trials"].is_null()) << row["Trials"];
  EXPECT_TRUE(row["Best"].is_null()) << row["Best"];
}

TEST_F(PrinterColumnsTest, TableCarriesTheCrdsColumnsForListAndGet) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", TuningJobObject("one", 2, 1)).ok());
  const json table = Get("/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs/one");
  EXPECT_EQ(last_code_, 200);
  ASSERT_EQ(table.value("kind", ""), "Table") << table.dump();
  EXPECT_EQ(table["apiVersion"], "meta.k8s.io/v1");
  std::vector<std::string> names;
  for (const json& c : table["columnDefinitions"]) {
    names.push_back(c["name"].get<std::string>() + "/" + c["type"].get<std::string>() + "/" +
                    std::to_string(c["priority"].get<int>()));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"Name/string/0", "State/string/0", "Queue/integer/0",
                                             "Trials/string/0", "Best/number/1", "Age/date/0"}));
  ASSERT_EQ(table["rows"].size(), 1u);
  EXPECT_EQ(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
  EXPECT_EQ(table["rows"][0]["object"]["metadata"]["name"], "one");
  // A client that takes plain JSON only gets the object.
  EXPECT_EQ(
      Get("/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs/one", "application/json")["kind"],
      "TrainingJob");
}

}  // namespace
}  // namespace kubetrain::kube
