// kubetrain's tuner and stopping rules behind a line protocol, for a
// benchmark that schedules real training itself (real_training.py): one JSON
// request per line on stdin, one JSON answer per line on stdout.
//
//   {"op": "suggest", "spec": SPEC, "seed": S, "history": [RECORD...], "count": N,
//    "options": {...}}   (options: BayesianOptions overrides, as bench_tuner_driver's)
//     -> {"assignments": [{"name": "value", ...}, ...]}
//   {"op": "judge", "spec": SPEC, "running": RECORD, "others": [RECORD...]}
//     -> {"stop": bool, "reached": [[step, value], ...]}   (successive halving)
//   {"op": "median", "spec": SPEC, "running": RECORD, "completed": [RECORD...]}
//     -> {"stop": bool}                                      (the median rule)
//   {"op": "promote", "spec": SPEC, "trials": [RECORD...], "paused": [ID...]}
//     -> {"trial": ID or null, "rung": k, "resource": r}   (successive halving with
//        pauses: resume ID, paused at rung k, or start a new trial; either trains
//        to resource r, the next rung)
//
// SPEC is a HyperparameterSpec in its JSON form (as in a TrainingJob);
// RECORD is {"id", "assignment": {...}, "status": "pending" | "running" |
// "completed" | "stopped" | "failed", "objective": x or null,
// "curve": [[step, value], ...], "rungs": [value, ...]}.
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench/tuner/tuner_overrides.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "operator/tuner/tuner.h"

namespace kubetrain::tuner::bench {
namespace {

TrialRecord ToRecord(const nlohmann::json& j) {
  TrialRecord r;
  r.trial_id = j.value("id", "");
  const nlohmann::json assignment = j.value("assignment", nlohmann::json::object());
  for (const auto& [name, value] : assignment.items()) {
    r.assignment[name] = value.get<std::string>();
  }
  const std::string status = j.value("status", "pending");
  r.status = status == "running"     ? TrialRecord::Status::kRunning
             : status == "completed" ? TrialRecord::Status::kCompleted
             : status == "stopped"   ? TrialRecord::Status::kStoppedEarly
             : status == "failed"    ? TrialRecord::Status::kFailed
                                     : TrialRecord::Status::kPending;
  if (j.contains("objective") && j["objective"].is_number()) r.objective = j["objective"];
  for (const auto& point : j.value("curve", nlohmann::json::array())) {
    r.curve.emplace_back(point[0].get<int64_t>(), point[1].get<double>());
  }
  for (const auto& v : j.value("rungs", nlohmann::json::array())) r.rungs.push_back(v);
  return r;
}

std::vector<TrialRecord> ToRecords(const nlohmann::json& j) {
  std::vector<TrialRecord> records;
  for (const auto& r : j) records.push_back(ToRecord(r));
  return records;
}

nlohmann::json Answer(const nlohmann::json& request) {
  v1::HyperparameterSpec spec;
  const auto parsed = google::protobuf::util::JsonStringToMessage(request.at("spec").dump(), &spec);
  if (!parsed.ok()) return {{"error", "spec: " + parsed.ToString()}};
  const std::string op = request.value("op", "");
  if (op == "suggest") {
    absl::StatusOr<std::unique_ptr<Tuner>> tuner =
        MakeTuner(spec, request.value("seed", uint64_t{0}), request);
    if (!tuner.ok()) return {{"error", tuner.status().ToString()}};
    nlohmann::json out = {{"assignments", nlohmann::json::array()}};
    for (const Assignment& a :
         (*tuner)->Suggest(ToRecords(request.at("history")), request.value("count", 1))) {
      out["assignments"].push_back(a);
    }
    return out;
  }
  if (op == "judge") {
    const RungVerdict verdict =
        JudgeAtRungs(spec, ToRecord(request.at("running")), ToRecords(request.at("others")));
    nlohmann::json reached = nlohmann::json::array();
    for (const auto& [step, value] : verdict.reached) reached.push_back({step, value});
    return {{"stop", verdict.stop}, {"reached", reached}};
  }
  if (op == "median") {
    return {{"stop", ShouldStopEarly(spec, ToRecord(request.at("running")),
                                     ToRecords(request.at("completed")))}};
  }
  if (op == "promote") {
    const std::set<std::string> paused = request.at("paused").get<std::set<std::string>>();
    const std::optional<Promotion> promotion =
        NextPromotion(spec, ToRecords(request.at("trials")), paused);
    if (!promotion) {
      return {{"trial", nullptr}, {"resource", RungResource(spec.early_stopping(), 0)}};
    }
    return {{"trial", promotion->trial_id},
            {"rung", promotion->rung},
            {"resource", RungResource(spec.early_stopping(), promotion->rung + 1)}};
  }
  return {{"error", "unknown op \"" + op + "\" (suggest, judge, median, promote)"}};
}

}  // namespace
}  // namespace kubetrain::tuner::bench

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::json request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    nlohmann::json answer;
    if (request.is_discarded()) {
      answer = {{"error", "not JSON: " + line.substr(0, 80)}};
    } else {
      try {
        answer = kubetrain::tuner::bench::Answer(request);
      } catch (const nlohmann::json::exception& e) {
        answer = {{"error", std::string("a request of the wrong shape: ") + e.what()}};
      }
    }
    std::cout << answer.dump() << std::endl;
  }
  return 0;
}
