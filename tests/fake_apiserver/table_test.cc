#include "tests/fake_apiserver/table.h"

#include "gtest/gtest.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;

TEST(TableTest, AcceptHeaders) {
  const char* kubectl =
      "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s."
      "io,application/json";
  EXPECT_TRUE(AcceptsTable(kubectl));
  EXPECT_TRUE(AcceptsPlainJson(kubectl));
  EXPECT_TRUE(AcceptsTable("application/json; as=Table; g=meta.k8s.io; v=v1"));
  EXPECT_FALSE(AcceptsTable("application/json;as=Table;v=v1beta1;g=meta.k8s.io"));
  EXPECT_FALSE(AcceptsTable("application/json"));
  EXPECT_FALSE(AcceptsPlainJson("application/json;as=Table;v=v1;g=meta.k8s.io"));
  EXPECT_TRUE(AcceptsPlainJson("*/*"));
}

TEST(TableTest, SimpleJsonPaths) {
  const json object = {
      {"status", {{"state", "RUNNING"}, {"trials", {{{"id", "1"}}, {{"id", "2"}}}}}}};
  EXPECT_EQ(**SelectSimpleJsonPath(object, ".status.state"), "RUNNING");
  EXPECT_EQ(**SelectSimpleJsonPath(object, ".status.trials[1].id"), "2");
  EXPECT_EQ(*SelectSimpleJsonPath(object, ".status.trials[2].id"), nullptr);
  EXPECT_EQ(*SelectSimpleJsonPath(object, ".status.missing"), nullptr);
  EXPECT_EQ(*SelectSimpleJsonPath(object, ".status.state.deeper"), nullptr);
  for (const char* bad :
       {"status.state", ".status..state", ".status.trials[x]", ".a[?(@.b)]", ""}) {
    EXPECT_FALSE(SelectSimpleJsonPath(object, bad).ok()) << bad;
  }
}

TEST(TableTest, HumanDurationsAsKubectlShowsThem) {
  EXPECT_EQ(HumanDuration(absl::Seconds(-5)), "<invalid>");
  EXPECT_EQ(HumanDuration(absl::Seconds(-1)), "0s");
  EXPECT_EQ(HumanDuration(absl::Seconds(45)), "45s");
  EXPECT_EQ(HumanDuration(absl::Seconds(119)), "119s");
  EXPECT_EQ(HumanDuration(absl::Seconds(303)), "5m3s");
  EXPECT_EQ(HumanDuration(absl::Minutes(5)), "5m");
  EXPECT_EQ(HumanDuration(absl::Minutes(42)), "42m");
  EXPECT_EQ(HumanDuration(absl::Minutes(190)), "3h10m");
  EXPECT_EQ(HumanDuration(absl::Hours(30)), "30h");
  EXPECT_EQ(HumanDuration(absl::Hours(75)), "3d3h");
  EXPECT_EQ(HumanDuration(absl::Hours(24 * 12)), "12d");
  EXPECT_EQ(HumanDuration(absl::Hours(24 * (365 * 2 + 3))), "2y3d");
  EXPECT_EQ(HumanDuration(absl::Hours(24 * 365 * 9)), "9y");
}

TEST(TableTest, CellsTakeTheColumnsType) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const json object = {
      {"metadata", {{"name", "j"}, {"creationTimestamp", "2027-01-15T04:50:00Z"}}},
      {"status", {{"n", 2.75}, {"i", 3}, {"s", "x"}, {"b", true}, {"o", {{"k", 1}}}}}};
  const json columns = json::array({
      {{"name", "S"}, {"type", "string"}, {"jsonPath", ".status.s"}},
      {{"name", "SN"}, {"type", "string"}, {"jsonPath", ".status.n"}},
      {{"name", "SO"}, {"type", "string"}, {"jsonPath", ".status.o"}},
      {{"name", "I"}, {"type", "integer"}, {"jsonPath", ".status.n"}},
      {{"name", "IS"}, {"type", "integer"}, {"jsonPath", ".status.s"}},
      {{"name", "N"}, {"type", "number"}, {"jsonPath", ".status.i"}},
      {{"name", "B"}, {"type", "boolean"}, {"jsonPath", ".status.b"}},
      {{"name", "D"}, {"type", "date"}, {"jsonPath", ".metadata.creationTimestamp"}},
      {{"name", "DX"}, {"type", "date"}, {"jsonPath", ".status.s"}},
      {{"name", "M"}, {"type", "string"}, {"jsonPath", ".status.missing"}},
  });
  absl::StatusOr<json> table = ToTable({object}, columns, "7", "Object", now);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ((*table)["metadata"]["resourceVersion"], "7");
  EXPECT_EQ((*table)["columnDefinitions"][0]["name"], "Name");
  EXPECT_EQ((*table)["columnDefinitions"][0]["format"], "name");
  const json& cells = (*table)["rows"][0]["cells"];
  EXPECT_EQ(cells, json::parse(R"(["j", "x", "2.75", "{\"k\":1}", 2, null, 3.0, true, "3h10m",
                                   "<invalid>", null])"));
  EXPECT_EQ((*table)["rows"][0]["object"], object);
  EXPECT_FALSE(ToTable({object}, columns, "7", "Everything", now).ok());
}

}  // namespace
}  // namespace kubetrain::fake_apiserver
