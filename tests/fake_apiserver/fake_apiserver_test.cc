#include "tests/fake_apiserver/fake_apiserver.h"

#define _TURN_OFF_PLATFORM_STRING  // cpprest's U() macro breaks gtest
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;
namespace http = web::http;

struct Response {
  int code;
  json body;
};

// The tests talk to the server with a real HTTP client (cpprestsdk), as the
// operator does, so the wire protocol is what is under test.
class FakeApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServer::Options options;
    options.default_nodes = 0;  // the tests that read nodes make their own
    options.bookmark_interval = absl::Milliseconds(50);
    auto server = FakeApiServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = std::make_unique<http::client::http_client>(server_->url());
  }

  Response Call(const http::method& method, const std::string& path, const json& body = nullptr,
                const std::string& content_type = "application/json") {
    http::http_request req(method);
    req.set_request_uri(path);
    if (!body.is_null()) req.set_body(body.dump(), content_type);
    http::http_response resp = client_->request(req).get();
    std::string text = resp.extract_utf8string(true).get();
    return Response{resp.status_code(), json::parse(text)};
  }

  static json Pod(const std::string& name, const std::string& job = "j1") {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"labels", {{"kubetrain.io/job-name", job}}}}},
            {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "x"}}})}}}};
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<http::client::http_client> client_;
};

// Reads one newline-delimited watch event; null at the end of the stream.
class WatchReader {
 public:
  explicit WatchReader(http::http_response response) : response_(std::move(response)) {}
  json Next() {
    concurrency::streams::container_buffer<std::string> line;
    size_t n = response_.body().read_line(line).get();
    if (n == 0 && line.collection().empty()) return nullptr;
    return json::parse(line.collection());
  }
  // Skips bookmarks.
  json NextNonBookmark() {
    for (;;) {
      json e = Next();
      if (e.is_null() || e["type"] != "BOOKMARK") return e;
    }
  }

 private:
  http::http_response response_;
};

TEST_F(FakeApiServerTest, CreateSetsServerFieldsAndRejectsDuplicates) {
  Response created = Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("p1"));
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.body["metadata"]["namespace"], "ns1");
  EXPECT_FALSE(created.body["metadata"]["uid"].get<std::string>().empty());
  EXPECT_FALSE(created.body["metadata"]["creationTimestamp"].get<std::string>().empty());
  EXPECT_EQ(created.body["metadata"]["generation"], 1);
  EXPECT_EQ(created.body["status"]["phase"], "Pending");

  Response again = Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("p1"));
  EXPECT_EQ(again.code, 409);
  EXPECT_EQ(again.body["kind"], "Status");
  EXPECT_EQ(again.body["reason"], "AlreadyExists");

  Response got = Call(http::methods::GET, "/api/v1/namespaces/ns1/pods/p1");
  EXPECT_EQ(got.code, 200);
  EXPECT_EQ(got.body["metadata"]["uid"], created.body["metadata"]["uid"]);

  Response missing = Call(http::methods::GET, "/api/v1/namespaces/ns1/pods/nope");
  EXPECT_EQ(missing.code, 404);
  EXPECT_EQ(missing.body["reason"], "NotFound");
  EXPECT_EQ(Call(http::methods::GET, "/api/v1/namespaces/ns1/widgets").code, 404);
}

TEST_F(FakeApiServerTest, StaleResourceVersionIsAConflict) {
  json pod = Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("p1")).body;
  json changed = pod;
  changed["metadata"]["labels"]["x"] = "1";
  Response ok = Call(http::methods::PUT, "/api/v1/namespaces/ns1/pods/p1", changed);
  ASSERT_EQ(ok.code, 200) << ok.body;
  EXPECT_GT(std::stoll(ok.body["metadata"]["resourceVersion"].get<std::string>()),
            std::stoll(pod["metadata"]["resourceVersion"].get<std::string>()));

  changed["metadata"]["labels"]["x"] = "2";  // still carries the old resourceVersion
  Response stale = Call(http::methods::PUT, "/api/v1/namespaces/ns1/pods/p1", changed);
  EXPECT_EQ(stale.code, 409);
  EXPECT_EQ(stale.body["reason"], "Conflict");
  EXPECT_EQ(server_->Get("pods", "ns1", "p1")->at("metadata").at("labels").at("x"), "1");
}

TEST_F(FakeApiServerTest, StatusSubresourceSeparatesSpecAndStatus) {
  json job = {{"apiVersion", "kubetrain.io/v1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "j1"}}},
              {"spec", {{"trainingInput", {{"scaleTier", "BASIC"}}}}},
              {"status", {{"state", "SUCCEEDED"}}}};
  const std::string base = "/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs";
  Response created = Call(http::methods::POST, base, job);
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_FALSE(created.body.contains("status")) << "status is dropped on create";

  json update = created.body;
  update["status"] = {{"state", "RUNNING"}};
  update["spec"]["trainingInput"]["scaleTier"] = "STANDARD_1";
  Response status = Call(http::methods::PUT, base + "/j1/status", update);
  ASSERT_EQ(status.code, 200) << status.body;
  EXPECT_EQ(status.body["status"]["state"], "RUNNING");
  EXPECT_EQ(status.body["spec"]["trainingInput"]["scaleTier"], "BASIC");
  EXPECT_EQ(status.body["metadata"]["generation"], 1);

  json main = status.body;
  main["status"] = {{"state", "FAILED"}};
  main["spec"]["trainingInput"]["scaleTier"] = "STANDARD_1";
  Response spec = Call(http::methods::PUT, base + "/j1", main);
  ASSERT_EQ(spec.code, 200) << spec.body;
  EXPECT_EQ(spec.body["status"]["state"], "RUNNING");
  EXPECT_EQ(spec.body["spec"]["trainingInput"]["scaleTier"], "STANDARD_1");
  EXPECT_EQ(spec.body["metadata"]["generation"], 2);

  // Writing the same status again is a no-op: the resourceVersion stays.
  Response same = Call(http::methods::PUT, base + "/j1/status", spec.body);
  EXPECT_EQ(same.body["metadata"]["resourceVersion"], spec.body["metadata"]["resourceVersion"]);
}

// The TrainingJob CRD is served from the start, and every write of a
// TrainingJob is pruned and validated against its schema, as kube-apiserver
// does: wrong types are 422 Invalid with one cause per field, unknown fields
// are dropped, and status writes are checked too.
TEST_F(FakeApiServerTest, TrainingJobsAreCheckedAgainstTheCrdSchema) {
  const std::string base = "/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs";
  json job = {{"apiVersion", "kubetrain.io/v1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "j1"}}},
              {"spec",
               {{"trainingInput",
                 {{"scaleTier", "CUSTOM"},
                  {"masterType", "standard"},
                  {"workerCount", "2"},
                  {"parameterServerCount", 1},
                  {"typo", true}}}}}};
  Response created = Call(http::methods::POST, base, job);
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.body["spec"]["trainingInput"]["workerCount"], "2") << "stored as written";
  EXPECT_FALSE(created.body["spec"]["trainingInput"].contains("typo")) << "pruned";

  job["metadata"]["name"] = "j2";
  job["spec"]["trainingInput"]["workerCount"] = "two";
  job["spec"]["trainingInput"]["scaleTier"] = "HUGE";
  Response refused = Call(http::methods::POST, base, job);
  ASSERT_EQ(refused.code, 422) << refused.body;
  EXPECT_EQ(refused.body["reason"], "Invalid");
  EXPECT_EQ(refused.body["message"],
            "TrainingJob.kubetrain.io \"j2\" is invalid: [spec.trainingInput.scaleTier: "
            "Unsupported value: \"HUGE\": supported values: \"SCALE_TIER_UNSPECIFIED\", "
            "\"BASIC\", \"STANDARD_1\", "
            "\"PREMIUM_1\", \"BASIC_GPU\", \"BASIC_TPU\", \"CUSTOM\", "
            "spec.trainingInput.workerCount: Invalid value: \"two\": "
            "spec.trainingInput.workerCount in body should match '^-?[0-9]+$']");
  ASSERT_EQ(refused.body["details"]["causes"].size(), 2u);
  EXPECT_EQ(refused.body["details"]["causes"][1]["field"], "spec.trainingInput.workerCount");
  EXPECT_EQ(refused.body["details"]["kind"], "TrainingJob");
  EXPECT_EQ(server_->Count("trainingjobs"), 1u) << "nothing stored";

  json status = created.body;
  status["status"] = {{"state", "RUNNING"}, {"startTime", "not a time"}};
  Response bad_status = Call(http::methods::PUT, base + "/j1/status", status);
  ASSERT_EQ(bad_status.code, 422) << bad_status.body;
  EXPECT_EQ(bad_status.body["details"]["causes"][0]["field"], "status.startTime");
}

TEST_F(FakeApiServerTest, MergePatchSetsPodPhase) {
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("p1"));
  json patch = {{"status", {{"phase", "Running"}}}};
  Response wrong = Call(http::methods::PATCH, "/api/v1/namespaces/ns1/pods/p1/status", patch);
  EXPECT_EQ(wrong.code, 415);
  Response ok = Call(http::methods::PATCH, "/api/v1/namespaces/ns1/pods/p1/status", patch,
                     "application/merge-patch+json");
  ASSERT_EQ(ok.code, 200) << ok.body;
  EXPECT_EQ(ok.body["status"]["phase"], "Running");
  EXPECT_EQ(ok.body["spec"]["containers"][0]["name"], "c");

  // On the main resource the status part of a patch is ignored.
  Response main =
      Call(http::methods::PATCH, "/api/v1/namespaces/ns1/pods/p1",
           {{"status", {{"phase", "Failed"}}}, {"metadata", {{"labels", {{"a", "b"}}}}}},
           "application/merge-patch+json");
  EXPECT_EQ(main.body["status"]["phase"], "Running");
  EXPECT_EQ(main.body["metadata"]["labels"]["a"], "b");
}

TEST_F(FakeApiServerTest, ListFiltersByLabelAndPages) {
  for (int i = 0; i < 5; ++i) {
    Call(http::methods::POST, "/api/v1/namespaces/ns1/pods",
         Pod(absl::StrCat("p", i), i % 2 == 0 ? "even" : "odd"));
  }
  Call(http::methods::POST, "/api/v1/namespaces/ns2/pods", Pod("q", "even"));

  Response even = Call(http::methods::GET,
                       "/api/v1/namespaces/ns1/pods?labelSelector=kubetrain.io%2Fjob-name%3Deven");
  ASSERT_EQ(even.code, 200);
  EXPECT_EQ(even.body["kind"], "PodList");
  EXPECT_EQ(even.body["items"].size(), 3u);
  Response all = Call(http::methods::GET, "/api/v1/pods?labelSelector=kubetrain.io/job-name=even");
  EXPECT_EQ(all.body["items"].size(), 4u);

  std::vector<std::string> names;
  std::string cont;
  do {
    Response page =
        Call(http::methods::GET,
             "/api/v1/namespaces/ns1/pods?limit=2" +
                 (cont.empty() ? "" : "&continue=" + web::uri::encode_data_string(cont)));
    ASSERT_EQ(page.code, 200);
    EXPECT_LE(page.body["items"].size(), 2u);
    for (const json& item : page.body["items"]) names.push_back(item["metadata"]["name"]);
    cont = page.body["metadata"].value("continue", "");
  } while (!cont.empty());
  EXPECT_EQ(names, (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4"}));
}

TEST_F(FakeApiServerTest, WatchStreamsEventsInOrderWithSelectorSemantics) {
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("before"));
  Response list = Call(http::methods::GET,
                       "/api/v1/namespaces/ns1/pods?labelSelector=kubetrain.io/job-name=j1");
  std::string rv = list.body["metadata"]["resourceVersion"];

  http::http_request req(http::methods::GET);
  req.set_request_uri(
      "/api/v1/namespaces/ns1/pods?watch=true&labelSelector=kubetrain.io/job-name%3Dj1&"
      "allowWatchBookmarks=true&resourceVersion=" +
      rv);
  WatchReader watch(client_->request(req).get());

  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("p1"));
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("other", "j2"));
  Call(http::methods::PATCH, "/api/v1/namespaces/ns1/pods/p1/status",
       {{"status", {{"phase", "Running"}}}}, "application/merge-patch+json");
  // Relabelling a pod out of the selector is a DELETED for this watch.
  Call(http::methods::PATCH, "/api/v1/namespaces/ns1/pods/before",
       {{"metadata", {{"labels", {{"kubetrain.io/job-name", "j3"}}}}}},
       "application/merge-patch+json");
  Call(http::methods::DEL, "/api/v1/namespaces/ns1/pods/p1");

  json e1 = watch.NextNonBookmark();
  EXPECT_EQ(e1["type"], "ADDED");
  EXPECT_EQ(e1["object"]["metadata"]["name"], "p1");
  json e2 = watch.NextNonBookmark();
  EXPECT_EQ(e2["type"], "MODIFIED");
  EXPECT_EQ(e2["object"]["status"]["phase"], "Running");
  json e3 = watch.NextNonBookmark();
  EXPECT_EQ(e3["type"], "DELETED");
  EXPECT_EQ(e3["object"]["metadata"]["name"], "before");
  json e4 = watch.NextNonBookmark();
  EXPECT_EQ(e4["type"], "DELETED");
  EXPECT_EQ(e4["object"]["metadata"]["name"], "p1");

  // With nothing else happening, bookmarks carry the latest resourceVersion.
  json bookmark = watch.Next();
  EXPECT_EQ(bookmark["type"], "BOOKMARK");
  EXPECT_EQ(bookmark["object"]["metadata"]["resourceVersion"],
            std::to_string(server_->CurrentResourceVersion()));
}

TEST_F(FakeApiServerTest, WatchWithoutResourceVersionStartsWithTheCurrentObjects) {
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("a"));
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("b"));
  http::http_request req(http::methods::GET);
  req.set_request_uri("/api/v1/namespaces/ns1/pods?watch=1");
  WatchReader watch(client_->request(req).get());
  EXPECT_EQ(watch.Next()["object"]["metadata"]["name"], "a");
  EXPECT_EQ(watch.Next()["object"]["metadata"]["name"], "b");
}

TEST_F(FakeApiServerTest, CompactedHistoryAnswersGone) {
  std::string rv =
      Call(http::methods::GET, "/api/v1/namespaces/ns1/pods").body["metadata"]["resourceVersion"];
  http::http_request open_req(http::methods::GET);
  open_req.set_request_uri("/api/v1/namespaces/ns1/pods?watch=true&resourceVersion=" + rv);
  WatchReader open_watch(client_->request(open_req).get());

  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("a"));
  EXPECT_EQ(open_watch.Next()["type"], "ADDED");
  server_->CompactHistory();
  json ended = open_watch.Next();
  EXPECT_EQ(ended["type"], "ERROR");
  EXPECT_EQ(ended["object"]["code"], 410);
  EXPECT_TRUE(open_watch.Next().is_null());

  http::http_request req(http::methods::GET);
  req.set_request_uri("/api/v1/namespaces/ns1/pods?watch=true&resourceVersion=" + rv);
  WatchReader watch(client_->request(req).get());
  json error = watch.Next();
  EXPECT_EQ(error["type"], "ERROR");
  EXPECT_EQ(error["object"]["code"], 410);
  EXPECT_EQ(error["object"]["reason"], "Expired");
  EXPECT_TRUE(watch.Next().is_null());
}

TEST_F(FakeApiServerTest, DropWatchesEndsStreams) {
  http::http_request req(http::methods::GET);
  req.set_request_uri("/api/v1/namespaces/ns1/pods?watch=true&resourceVersion=" +
                      std::to_string(server_->CurrentResourceVersion()));
  WatchReader watch(client_->request(req).get());
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("a"));
  EXPECT_EQ(watch.Next()["type"], "ADDED");
  EXPECT_EQ(server_->OpenWatchCount(), 1);
  server_->DropWatches();
  EXPECT_TRUE(watch.Next().is_null());
}

TEST_F(FakeApiServerTest, InjectedFailuresThenRecovery) {
  server_->FailNextRequests(2, 503);
  EXPECT_EQ(Call(http::methods::GET, "/api/v1/namespaces/ns1/pods").code, 503);
  Response second = Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("a"));
  EXPECT_EQ(second.code, 503);
  EXPECT_EQ(second.body["kind"], "Status");
  EXPECT_EQ(server_->Count("pods"), 0u) << "a failed request changes nothing";
  EXPECT_EQ(Call(http::methods::GET, "/api/v1/namespaces/ns1/pods").code, 200);
}

// The latency model: writes wait longer than reads, and no more than
// max_in_flight requests are served at once, so four concurrent writes
// through two places take at least two write latencies; an open watch holds
// no place. (Lower bounds only: a slow machine only adds.)
TEST(FakeApiServerLatencyTest, WritesWaitLongerAndShareTheInFlightPlaces) {
  FakeApiServer::Options options;
  options.request_latency = absl::Milliseconds(20);
  options.write_latency = absl::Milliseconds(200);
  options.max_in_flight = 2;
  auto server = FakeApiServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  http::client::http_client client((*server)->url());
  // A watch that stays open throughout.
  http::http_request watch_request(http::methods::GET);
  watch_request.set_request_uri("/api/v1/namespaces/ns1/pods?watch=true");
  http::http_response watch = client.request(watch_request).get();
  ASSERT_EQ(watch.status_code(), 200);

  absl::Time start = absl::Now();
  http::http_request get(http::methods::GET);
  get.set_request_uri("/api/v1/namespaces/ns1/pods");
  EXPECT_EQ(client.request(get).get().status_code(), 200);
  const absl::Duration read = absl::Now() - start;
  EXPECT_GE(read, absl::Milliseconds(20));

  start = absl::Now();
  std::vector<pplx::task<http::http_response>> writes;
  for (int i = 0; i < 4; ++i) {
    http::http_request create(http::methods::POST);
    create.set_request_uri("/api/v1/namespaces/ns1/pods");
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", absl::StrCat("p", i)}}},
                {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "x"}}})}}}};
    create.set_body(pod.dump(), "application/json");
    writes.push_back(client.request(create));
  }
  for (auto& w : writes) EXPECT_EQ(w.get().status_code(), 201);
  EXPECT_GE(absl::Now() - start, 2 * absl::Milliseconds(220));
  EXPECT_EQ((*server)->PeakInFlight(), 2) << "the four writes were not served two at a time";
  EXPECT_EQ((*server)->Count("pods"), 4u);
  EXPECT_EQ((*server)->OpenWatchCount(), 1);
}

TEST_F(FakeApiServerTest, DeletingAnOwnerDeletesItsDependents) {
  json job = {{"metadata", {{"name", "j1"}}}, {"spec", json::object()}};
  json created =
      Call(http::methods::POST, "/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs", job).body;
  json pod = Pod("j1-worker-0");
  pod["metadata"]["ownerReferences"] = {{{"apiVersion", "kubetrain.io/v1"},
                                         {"kind", "TrainingJob"},
                                         {"name", "j1"},
                                         {"uid", created["metadata"]["uid"]},
                                         {"controller", true}}};
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", pod);
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("unowned"));
  EXPECT_EQ(Call(http::methods::DEL, "/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs/j1").code,
            200);
  EXPECT_EQ(server_->Count("pods"), 1u);
  EXPECT_TRUE(server_->Get("pods", "ns1", "unowned").ok());
  EXPECT_EQ(Call(http::methods::DEL, "/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs/j1").code,
            404);
}

// The garbage collector knows owners by uid: a TrainingJob created again
// under its name is another object (a new uid) and owns nothing of its
// predecessor's.
TEST_F(FakeApiServerTest, AnOwnerCreatedAgainUnderItsNameIsAnotherOwner) {
  const std::string jobs = "/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs";
  json job = {{"metadata", {{"name", "j1"}}}, {"spec", json::object()}};
  const std::string first_uid = Call(http::methods::POST, jobs, job).body["metadata"]["uid"];
  json pod = Pod("j1-worker-0");
  pod["metadata"]["ownerReferences"] = {{{"apiVersion", "kubetrain.io/v1"},
                                         {"kind", "TrainingJob"},
                                         {"name", "j1"},
                                         {"uid", first_uid},
                                         {"controller", true}}};
  ASSERT_EQ(Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", pod).code, 201);
  ASSERT_EQ(Call(http::methods::DEL, jobs + "/j1", json{{"propagationPolicy", "Orphan"}}).code,
            200);
  ASSERT_TRUE(server_->Get("pods", "ns1", "j1-worker-0").ok()) << "orphaned, not collected";

  const std::string second_uid = Call(http::methods::POST, jobs, job).body["metadata"]["uid"];
  EXPECT_NE(second_uid, first_uid);
  ASSERT_EQ(Call(http::methods::DEL, jobs + "/j1").code, 200);
  EXPECT_TRUE(server_->Get("pods", "ns1", "j1-worker-0").ok()) << "owned by the first j1 only";
}

TEST_F(FakeApiServerTest, CountsRequestsByVerbAndResource) {
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("a"));
  Call(http::methods::GET, "/api/v1/namespaces/ns1/pods/a");
  Call(http::methods::GET, "/api/v1/namespaces/ns1/pods");
  Call(http::methods::PATCH, "/api/v1/namespaces/ns1/pods/a/status",
       {{"status", {{"phase", "Running"}}}}, "application/merge-patch+json");
  auto counts = server_->RequestCounts();
  EXPECT_EQ(counts["create pods"], 1);
  EXPECT_EQ(counts["get pods"], 1);
  EXPECT_EQ(counts["list pods"], 1);
  EXPECT_EQ(counts["patch pods/status"], 1);
}

// The real server's event field labels, as `kubectl describe` selects a
// resource's events with them.
TEST_F(FakeApiServerTest, EventsAreSelectedByTheirFieldLabels) {
  auto event = [](const std::string& name, const std::string& kind, const std::string& object,
                  const std::string& type) {
    return json{{"metadata", {{"name", name}}},
                {"involvedObject", {{"kind", kind}, {"name", object}, {"uid", "u-" + object}}},
                {"reason", "R"},
                {"type", type},
                {"source", {{"component", "kubetrain-operator"}}}};
  };
  ASSERT_EQ(Call(http::methods::POST, "/api/v1/namespaces/ns1/events",
                 event("e1", "TrainingJob", "mnist", "Normal"))
                .code,
            201);
  ASSERT_EQ(Call(http::methods::POST, "/api/v1/namespaces/ns1/events",
                 event("e2", "Pod", "mnist-master-0", "Warning"))
                .code,
            201);
  ASSERT_EQ(Call(http::methods::POST, "/api/v1/namespaces/ns1/events",
                 event("e3", "TrainingJob", "other", "Warning"))
                .code,
            201);
  auto names = [&](const std::string& selector) {
    Response r = Call(http::methods::GET, "/api/v1/namespaces/ns1/events?fieldSelector=" +
                                              web::uri::encode_data_string(selector));
    EXPECT_EQ(r.code, 200) << r.body.dump();
    std::vector<std::string> out;
    for (const json& item : r.body.value("items", json::array())) {
      out.push_back(item["metadata"]["name"]);
    }
    return out;
  };
  EXPECT_EQ(names("involvedObject.kind=TrainingJob,involvedObject.name=mnist"),
            std::vector<std::string>{"e1"});
  EXPECT_EQ(names("involvedObject.kind==Pod"), std::vector<std::string>{"e2"});
  EXPECT_EQ(names("type!=Normal"), (std::vector<std::string>{"e2", "e3"}));
  EXPECT_EQ(names("involvedObject.uid=u-other,source=kubetrain-operator"),
            std::vector<std::string>{"e3"});
  EXPECT_EQ(names("metadata.name=e2"), std::vector<std::string>{"e2"});
  // Labels of other resources are not event labels, and the other way round.
  EXPECT_EQ(
      Call(http::methods::GET, "/api/v1/namespaces/ns1/events?fieldSelector=spec.nodeName%3Dx")
          .code,
      400);
  EXPECT_EQ(
      Call(http::methods::GET, "/api/v1/namespaces/ns1/pods?fieldSelector=involvedObject.name%3Dx")
          .code,
      400);
}

TEST_F(FakeApiServerTest, TablesOnlyForResourcesWithPrinterColumns) {
  Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", Pod("p"));
  auto get = [&](const std::string& path, const std::string& accept) {
    http::http_request req(http::methods::GET);
    req.set_request_uri(path);
    req.headers().add("Accept", accept);
    http::http_response resp = client_->request(req).get();
    return Response{resp.status_code(), json::parse(resp.extract_utf8string(true).get())};
  };
  const std::string table_only = "application/json;as=Table;v=v1;g=meta.k8s.io";
  // No printer columns for pods here: plain JSON when the client takes it...
  Response fallback = get("/api/v1/namespaces/ns1/pods", table_only + ",application/json");
  EXPECT_EQ(fallback.code, 200);
  EXPECT_EQ(fallback.body["kind"], "PodList");
  // ...else 406, as the real server answers a type it cannot produce.
  EXPECT_EQ(get("/api/v1/namespaces/ns1/pods", table_only).code, 406);

  json crd = {{"spec",
               {{"group", "kubetrain.io"},
                {"names", {{"plural", "trainingjobs"}}},
                {"versions",
                 {{{"name", "v1"},
                   {"additionalPrinterColumns",
                    {{{"name", "State"}, {"type", "string"}, {"jsonPath", ".status.state"}},
                     {{"name", "Steps"},
                      {"type", "integer"},
                      {"jsonPath", ".status.trainingOutput.trials[0].finalMetric.trainingStep"}},
                     {{"name", "Age"},
                      {"type", "date"},
                      {"jsonPath", ".metadata.creationTimestamp"}}}}}}}}}};
  ASSERT_TRUE(server_->ServeCrd(crd).ok());
  ASSERT_TRUE(
      server_
          ->Create("trainingjobs", "ns1", {{"metadata", {{"name", "a"}}}, {"spec", json::object()}})
          .ok());
  ASSERT_TRUE(
      server_
          ->MergePatch(
              "trainingjobs", "ns1", "a",
              {{"status",
                {{"state", "RUNNING"},
                 {"trainingOutput", {{"trials", {{{"finalMetric", {{"trainingStep", 785}}}}}}}}}}},
              "status")
          .ok());
  ASSERT_TRUE(
      server_
          ->Create("trainingjobs", "ns1", {{"metadata", {{"name", "b"}}}, {"spec", json::object()}})
          .ok());
  Response table =
      get("/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs?includeObject=None", table_only);
  ASSERT_EQ(table.code, 200) << table.body.dump();
  EXPECT_EQ(table.body["kind"], "Table");
  ASSERT_EQ(table.body["rows"].size(), 2u);
  const json& a = table.body["rows"][0]["cells"];
  EXPECT_EQ(a[0], "a");
  EXPECT_EQ(a[1], "RUNNING");
  EXPECT_EQ(a[2], 785);
  EXPECT_TRUE(a[3].is_string()) << a[3];  // an age: "0s", "1s"...
  EXPECT_FALSE(table.body["rows"][0].contains("object"));
  const json& b = table.body["rows"][1]["cells"];  // nothing to select: null cells
  EXPECT_TRUE(b[1].is_null());
  EXPECT_TRUE(b[2].is_null());
  EXPECT_EQ(
      get("/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs?includeObject=All", table_only).code,
      400);

  json bad = crd;
  bad["spec"]["versions"][0]["additionalPrinterColumns"][0]["jsonPath"] = ".status[?(@.x)]";
  EXPECT_FALSE(server_->ServeCrd(bad).ok());
  json other = crd;
  other["spec"]["names"]["plural"] = "widgets";
  EXPECT_FALSE(server_->ServeCrd(other).ok());
}

TEST_F(FakeApiServerTest, LeasesLiveInTheCoordinationGroup) {
  json lease = {{"metadata", {{"name", "kubetrain-operator"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}}}};
  EXPECT_EQ(
      Call(http::methods::POST, "/apis/coordination.k8s.io/v1/namespaces/ns1/leases", lease).code,
      201);
  EXPECT_EQ(Call(http::methods::POST, "/api/v1/namespaces/ns1/leases", lease).code, 404);
}

TEST_F(FakeApiServerTest, ClaimsStartPendingKeepStatusApartAndGoWithTheirOwner) {
  json job = {{"metadata", {{"name", "j1"}}}, {"spec", json::object()}};
  json owner =
      Call(http::methods::POST, "/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs", job).body;
  json claim = {
      {"apiVersion", "v1"},
      {"kind", "PersistentVolumeClaim"},
      {"metadata",
       {{"name", "j1-output"},
        {"labels", {{"kubetrain.io/job-name", "j1"}}},
        {"ownerReferences",
         {{{"apiVersion", "kubetrain.io/v1"},
           {"kind", "TrainingJob"},
           {"name", "j1"},
           {"uid", owner["metadata"]["uid"]},
           {"controller", true}}}}}},
      {"spec",
       {{"accessModes", {"ReadWriteMany"}}, {"resources", {{"requests", {{"storage", "1Gi"}}}}}}},
      {"status", {{"phase", "Bound"}}}};
  Response created =
      Call(http::methods::POST, "/api/v1/namespaces/ns1/persistentvolumeclaims", claim);
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.body["status"]["phase"], "Pending");  // not what the client sent
  EXPECT_EQ(created.body["kind"], "PersistentVolumeClaim");
  EXPECT_EQ(Call(http::methods::POST, "/api/v1/namespaces/ns1/persistentvolumeclaims", claim).code,
            409);
  Response bound =
      Call(http::methods::PATCH, "/api/v1/namespaces/ns1/persistentvolumeclaims/j1-output/status",
           {{"status", {{"phase", "Bound"}}}}, "application/merge-patch+json");
  ASSERT_EQ(bound.code, 200) << bound.body;
  EXPECT_EQ(bound.body["status"]["phase"], "Bound");
  Response listed = Call(
      http::methods::GET,
      "/api/v1/namespaces/ns1/persistentvolumeclaims?labelSelector=kubetrain.io%2Fjob-name%3Dj1");
  ASSERT_EQ(listed.code, 200);
  ASSERT_EQ(listed.body["items"].size(), 1u);
  EXPECT_EQ(Call(http::methods::DEL, "/apis/kubetrain.io/v1/namespaces/ns1/trainingjobs/j1").code,
            200);
  EXPECT_EQ(server_->Count("persistentvolumeclaims"), 0u);
}

TEST_F(FakeApiServerTest, ConfigMapsHoldStringsUpToOneMebibyte) {
  const std::string path = "/api/v1/namespaces/ns1/configmaps";
  json cm = {{"metadata", {{"name", "c1"}, {"labels", {{"kubetrain.io/job-name", "j1"}}}}},
             {"data", {{"trial-1.json", "{}"}}}};
  Response created = Call(http::methods::POST, path, cm);
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.body["kind"], "ConfigMap");
  EXPECT_EQ(created.body["data"]["trial-1.json"], "{}");
  EXPECT_EQ(Call(http::methods::GET, path + "?labelSelector=kubetrain.io%2Fjob-name%3Dj1")
                .body["items"]
                .size(),
            1u);
  EXPECT_EQ(Call(http::methods::GET, "/api/v1/configmaps").body["items"].size(), 1u);

  // Updated in place (PUT with the read resourceVersion), then too large.
  json current = created.body;
  current["data"]["trial-2.json"] = "{\"trialId\":\"2\"}";
  Response updated = Call(http::methods::PUT, path + "/c1", current);
  ASSERT_EQ(updated.code, 200) << updated.body;
  json big = updated.body;
  big["data"]["trial-3.json"] = std::string(1024 * 1024, 'x');
  Response too_big = Call(http::methods::PUT, path + "/c1", big);
  EXPECT_EQ(too_big.code, 422) << too_big.body;
  EXPECT_EQ(too_big.body["reason"], "Invalid");
  EXPECT_NE(
      too_big.body["message"].get<std::string>().find("Too long: must have at most 1048576 bytes"),
      std::string::npos)
      << too_big.body;
  EXPECT_EQ(server_->Get("configmaps", "ns1", "c1")->at("data").size(), 2u);

  // Keys and values as the API types them.
  json bad_key = {{"metadata", {{"name", "c2"}}}, {"data", {{"a b", "x"}}}};
  EXPECT_EQ(Call(http::methods::POST, path, bad_key).code, 422);
  json not_a_string = {{"metadata", {{"name", "c3"}}}, {"data", {{"n", 1}}}};
  EXPECT_EQ(Call(http::methods::POST, path, not_a_string).code, 400);
  EXPECT_EQ(server_->Count("configmaps"), 1u);
}

namespace scheduling {

json Node(const std::string& name, const std::string& cpu, json extra = json::object()) {
  json node = {{"metadata", {{"name", name}}},
               {"status", {{"allocatable", {{"cpu", cpu}, {"memory", "8Gi"}, {"pods", "110"}}}}}};
  node.merge_patch(extra);
  return node;
}

json PodOf(const std::string& name, const std::string& cpu, json spec_extra = json::object()) {
  json pod = {
      {"metadata", {{"name", name}}},
      {"spec",
       {{"containers",
         {{{"name", "c"}, {"image", "x"}, {"resources", {{"requests", {{"cpu", cpu}}}}}}}}}}};
  pod["spec"].merge_patch(spec_extra);
  return pod;
}

std::string Phase(FakeApiServer& server, const std::string& pod) {
  return server.Get("pods", "ns1", pod)->value("/status/phase"_json_pointer, std::string());
}

}  // namespace scheduling

TEST_F(FakeApiServerTest, NodesAndPriorityClassesAreClusterScoped) {
  Response made = Call(http::methods::POST, "/api/v1/nodes", scheduling::Node("n1", "4"));
  ASSERT_EQ(made.code, 201) << made.body.dump();
  EXPECT_FALSE(made.body["metadata"].contains("namespace"));
  EXPECT_EQ(Call(http::methods::GET, "/api/v1/nodes/n1").body["status"]["allocatable"]["cpu"], "4");
  EXPECT_EQ(Call(http::methods::GET, "/api/v1/nodes").body["items"].size(), 1u);
  EXPECT_EQ(Call(http::methods::GET, "/api/v1/namespaces/ns1/nodes").code, 404);
  ASSERT_EQ(Call(http::methods::POST, "/apis/scheduling.k8s.io/v1/priorityclasses",
                 {{"metadata", {{"name", "high"}}}, {"value", 1000}})
                .code,
            201);
  EXPECT_EQ(
      Call(http::methods::GET, "/apis/scheduling.k8s.io/v1/priorityclasses/high").body["value"],
      1000);
  EXPECT_EQ(Call(http::methods::GET, "/api/v1").body["resources"][0].value("namespaced", true),
            true);  // pods and the rest stay namespaced
}

TEST_F(FakeApiServerTest, PodGroupsAreServedOnlyWhereTheirCrdsAreAndEachGroupHasItsOwn) {
  const std::string coscheduling = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns1/podgroups";
  const std::string volcano = "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns1/podgroups";
  auto group = [](int members) {
    return json{{"metadata", {{"name", "gang"}}}, {"spec", {{"minMember", members}}}};
  };
  // A cluster without the gang schedulers.
  EXPECT_EQ(Call(http::methods::POST, coscheduling, group(3)).code, 404);
  EXPECT_EQ(Call(http::methods::POST, volcano, group(3)).code, 404);
  EXPECT_EQ(Call(http::methods::GET, "/apis/scheduling.volcano.sh/v1beta1").code, 404);

  FakeApiServer::Options options;
  options.pod_group_crds = true;
  server_ = *FakeApiServer::Start(options);
  client_ = std::make_unique<http::client::http_client>(server_->url());
  ASSERT_EQ(Call(http::methods::POST, coscheduling, group(3)).code, 201);
  // The same name in the other group is another object.
  ASSERT_EQ(Call(http::methods::POST, volcano, group(4)).code, 201);
  EXPECT_EQ(Call(http::methods::POST, volcano, group(4)).code, 409);
  EXPECT_EQ(Call(http::methods::GET, coscheduling + "/gang").body["spec"]["minMember"], 3);
  const json from_volcano = Call(http::methods::GET, volcano + "/gang").body;
  EXPECT_EQ(from_volcano["spec"]["minMember"], 4);
  EXPECT_EQ(from_volcano["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(server_->List("podgroups.scheduling.x-k8s.io", "ns1").size(), 1u);
  EXPECT_EQ(Call(http::methods::GET, "/apis/scheduling.volcano.sh/v1beta1").code, 200);
}

TEST(FakeApiServerSchedulerTest, BindsWhatFitsInCreationOrderAndTheRestWaitsUnschedulable) {
  FakeApiServer::Options options;
  options.schedule_pods = true;
  options.default_nodes = 0;
  std::unique_ptr<FakeApiServer> server = *FakeApiServer::Start(options);
  ASSERT_TRUE(server->Create("nodes", "", scheduling::Node("n1", "2")).ok());
  ASSERT_TRUE(server->Create("nodes", "", scheduling::Node("n2", "2")).ok());
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(server->Create("pods", "ns1", scheduling::PodOf(name, "1500m")).ok());
  }
  json a = *server->Get("pods", "ns1", "a");
  json b = *server->Get("pods", "ns1", "b");
  EXPECT_EQ(a["status"]["phase"], "Running");
  EXPECT_EQ(b["status"]["phase"], "Running");
  EXPECT_NE(a["spec"]["nodeName"], b["spec"]["nodeName"]);  // 1.5 + 1.5 > 2
  EXPECT_EQ(a["status"]["conditions"][0]["type"], "PodScheduled");
  EXPECT_EQ(a["status"]["conditions"][0]["status"], "True");
  json c = *server->Get("pods", "ns1", "c");
  EXPECT_EQ(c["status"]["phase"], "Pending");
  EXPECT_FALSE(c["spec"].contains("nodeName"));
  EXPECT_EQ(c["status"]["conditions"][0]["reason"], "Unschedulable");
  EXPECT_EQ(c["status"]["conditions"][0]["message"],
            "0/2 nodes are available: 2 Insufficient cpu.");

  // A pod that ends frees what it held; the waiting one is bound.
  ASSERT_TRUE(
      server->MergePatch("pods", "ns1", "a", {{"status", {{"phase", "Succeeded"}}}}, "status")
          .ok());
  EXPECT_EQ(scheduling::Phase(*server, "c"), "Running");
  EXPECT_EQ((*server->Get("pods", "ns1", "c"))["spec"]["nodeName"], a["spec"]["nodeName"]);
}

TEST(FakeApiServerSchedulerTest, SelectorsTaintsAndCordonsKeepPodsOffNodes) {
  FakeApiServer::Options options;
  options.schedule_pods = true;
  options.default_nodes = 0;
  std::unique_ptr<FakeApiServer> server = *FakeApiServer::Start(options);
  ASSERT_TRUE(
      server
          ->Create("nodes", "",
                   scheduling::Node(
                       "gpu", "8",
                       {{"metadata", {{"labels", {{"pool", "gpu"}}}}},
                        {"spec",
                         {{"taints", {{{"key", "nvidia.com/gpu"}, {"effect", "NoSchedule"}}}}}}}))
          .ok());
  ASSERT_TRUE(server
                  ->Create("nodes", "",
                           scheduling::Node("cordoned", "8", {{"spec", {{"unschedulable", true}}}}))
                  .ok());
  ASSERT_TRUE(server->Create("pods", "ns1", scheduling::PodOf("plain", "1")).ok());
  EXPECT_EQ((*server->Get("pods", "ns1", "plain"))["status"]["conditions"][0]["message"],
            "0/2 nodes are available: 1 node(s) had untolerated taint, 1 node(s) were "
            "unschedulable.");
  ASSERT_TRUE(
      server
          ->Create("pods", "ns1",
                   scheduling::PodOf(
                       "tolerant", "1",
                       {{"nodeSelector", {{"pool", "gpu"}}},
                        {"tolerations", {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}}}}}))
          .ok());
  EXPECT_EQ((*server->Get("pods", "ns1", "tolerant"))["spec"]["nodeName"], "gpu");
  ASSERT_TRUE(server
                  ->Create("pods", "ns1",
                           scheduling::PodOf("elsewhere", "1", {{"nodeSelector", {{"pool", "x"}}}}))
                  .ok());
  EXPECT_EQ(scheduling::Phase(*server, "elsewhere"), "Pending");
  // Volcano's pod is Volcano's to place: no binding, no verdict.
  ASSERT_TRUE(
      server->Create("pods", "ns1", scheduling::PodOf("gang", "1", {{"schedulerName", "volcano"}}))
          .ok());
  const json gang = *server->Get("pods", "ns1", "gang");
  EXPECT_FALSE(gang["spec"].contains("nodeName"));
  EXPECT_FALSE(gang.contains("status") && gang["status"].contains("conditions"));
}

TEST_F(FakeApiServerTest, AQuotaOnRequestsRefusesThePodThatWouldPassIt) {
  ASSERT_TRUE(server_
                  ->Create("resourcequotas", "ns1",
                           {{"metadata", {{"name", "compute"}}},
                            {"spec", {{"hard", {{"requests.cpu", "2"}}}}}})
                  .ok());
  ASSERT_EQ(
      Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", scheduling::PodOf("first", "1500m"))
          .code,
      201);
  Response refused =
      Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", scheduling::PodOf("second", "1"));
  EXPECT_EQ(refused.code, 403);
  EXPECT_EQ(refused.body["message"],
            "pods \"second\" is forbidden: exceeded quota: compute, requested: requests.cpu=1, "
            "used: requests.cpu=1500m, limited: requests.cpu=2");
  // A finished pod holds nothing.
  ASSERT_TRUE(
      server_->MergePatch("pods", "ns1", "first", {{"status", {{"phase", "Succeeded"}}}}, "status")
          .ok());
  EXPECT_EQ(
      Call(http::methods::POST, "/api/v1/namespaces/ns1/pods", scheduling::PodOf("second", "1"))
          .code,
      201);
}

// A sidecar (an init container that keeps running) counts beside the
// containers; another init container only while it runs, alone.
TEST_F(FakeApiServerTest, AQuotaCountsASidecarBesideTheContainers) {
  ASSERT_TRUE(server_
                  ->Create("resourcequotas", "ns1",
                           {{"metadata", {{"name", "compute"}}},
                            {"spec", {{"hard", {{"requests.cpu", "2"}}}}}})
                  .ok());
  auto init = [](const std::string& name, bool sidecar) {
    json container = {
        {"name", name}, {"image", "x"}, {"resources", {{"requests", {{"cpu", "600m"}}}}}};
    if (sidecar) container["restartPolicy"] = "Always";
    return json{{"initContainers", json::array({container})}};
  };
  Response refused = Call(http::methods::POST, "/api/v1/namespaces/ns1/pods",
                          scheduling::PodOf("with-sidecar", "1500m", init("metrics", true)));
  EXPECT_EQ(refused.code, 403);
  EXPECT_THAT(refused.body["message"].get<std::string>(),
              ::testing::HasSubstr("requested: requests.cpu=2100m"));
  EXPECT_EQ(Call(http::methods::POST, "/api/v1/namespaces/ns1/pods",
                 scheduling::PodOf("with-setup", "1500m", init("setup", false)))
                .code,
            201);
}

}  // namespace
}  // namespace kubetrain::fake_apiserver
