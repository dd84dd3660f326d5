#include "cli/jobs_format.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "api/codec.h"
#include "api/defaults.h"
#include "google/protobuf/util/time_util.h"
#include "operator/core/gang_admission.h"
#include "operator/core/reconciler.h"
#include "operator/core/waiting_reasons.h"
#include "operator/tuner/tuner.h"

namespace kubetrain::cli {
namespace {

nlohmann::json ToJson(const google::protobuf::Message& message) {
  return nlohmann::json::parse(api::EncodeJson(message), nullptr, false);
}

std::string Str(const nlohmann::json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

// hp's earlyStopping as the message the tuner reads (JobResource printed it
// from one), so rungs are placed by the tuner's own arithmetic.
v1::EarlyStoppingSpec StoppingOf(const nlohmann::json& hp) {
  v1::EarlyStoppingSpec stopping;
  api::DecodeMessage(hp.value("earlyStopping", nlohmann::json::object()).dump(), &stopping);
  return stopping;
}

bool Halving(const v1::EarlyStoppingSpec& stopping) {
  return stopping.algorithm() == v1::EarlyStoppingSpec::SUCCESSIVE_HALVING;
}

// Where rung `k` is: "report 3", "step 600".
std::string RungAt(const v1::EarlyStoppingSpec& stopping, size_t k) {
  return absl::StrCat(stopping.resource() == v1::EarlyStoppingSpec::STEPS ? "step " : "report ",
                      tuner::RungResource(stopping, static_cast<int>(k)));
}

// A plain table: a header row and aligned columns.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

// status.outputLocation in one line: "/outputs on claim team-outputs
// (subPath runs/1)", with a warning when the outputs go with the pods.
std::string OutputsLine(const nlohmann::json& location) {
  std::string line = Str(location.value("path", nlohmann::json()));
  const std::string claim = Str(location.value("claimName", nlohmann::json()));
  const std::string volume = Str(location.value("volumeName", nlohmann::json()));
  const std::string sub_path = Str(location.value("subPath", nlohmann::json()));
  if (!claim.empty()) line += " on claim " + claim;
  if (claim.empty() && !volume.empty()) line += " on volume " + volume;
  if (!sub_path.empty()) line += " (subPath " + sub_path + ")";
  if (location.value("ephemeral", false)) {
    line += volume.empty() ? ": inside each replica" : ", an emptyDir";
    line += ", lost with the pods (no spec.outputStorage)";
  }
  return line;
}

}  // namespace

void SortTrials(std::vector<v1::HyperparameterOutput>& trials,
                v1::HyperparameterSpec::GoalType goal) {
  const bool minimize = goal == v1::HyperparameterSpec::MINIMIZE;
  auto id_of = [](const v1::HyperparameterOutput& t) {
    int64_t id = 0;
    return absl::SimpleAtoi(t.trial_id(), &id) ? id : INT64_MAX;
  };
  std::stable_sort(trials.begin(), trials.end(),
                   [&](const v1::HyperparameterOutput& a, const v1::HyperparameterOutput& b) {
                     if (a.has_final_metric() != b.has_final_metric()) return a.has_final_metric();
                     if (a.has_final_metric()) {
                       double x = a.final_metric().objective_value();
                       double y = b.final_metric().objective_value();
                       if (x != y) return minimize ? x < y : x > y;
                     }
                     return id_of(a) < id_of(b);
                   });
}

nlohmann::json JobResource(const v1::TrainingJob& job,
                           const std::vector<v1::HyperparameterOutput>& archived) {
  const v1::TrainingJobStatus& status = job.status();
  nlohmann::json resource = nlohmann::json::object();
  resource["jobId"] = job.metadata().name();
  nlohmann::json status_json = ToJson(status);
  for (const char* key : {"createTime", "startTime", "endTime", "errorMessage"}) {
    if (status_json.contains(key)) resource[key] = status_json[key];
  }
  resource["state"] =
      v1::State_Name(status.state() == v1::STATE_UNSPECIFIED ? v1::QUEUED : status.state());
  // Why replicas do not run (yet, or again), while the operator says so.
  for (const v1::Condition& c : status.conditions()) {
    // Replicas that run without the GPUs they asked for.
    if (c.type() == core::kNoGpuCondition && c.status() == "True")
      resource["warning"] = c.message();
    const bool queued = c.type() == core::kAdmittedCondition && c.status() == "False";
    if (!queued && (c.type() != core::kReplicasWaitingCondition || c.status() != "True")) continue;
    nlohmann::json waiting = ToJson(c);
    waiting.erase("type");
    waiting.erase("status");
    waiting.erase("lastUpdateTime");
    if (waiting.contains("lastTransitionTime")) {
      waiting["since"] = waiting["lastTransitionTime"];
      waiting.erase("lastTransitionTime");
    }
    if (queued && status.queue_position() > 0) waiting["position"] = status.queue_position();
    resource[queued ? "queued" : "waiting"] = waiting;
  }
  if (!job.metadata().labels().empty()) resource["labels"] = ToJson(job.metadata())["labels"];
  resource["trainingInput"] = ToJson(job.spec().training_input());
  if (status.has_output_location()) resource["outputLocation"] = ToJson(status.output_location());

  v1::TrainingOutput output = status.training_output();
  std::vector<v1::HyperparameterOutput> trials(output.trials().begin(), output.trials().end());
  for (const v1::HyperparameterOutput& t : archived) {
    bool present = std::any_of(
        trials.begin(), trials.end(),
        [&](const v1::HyperparameterOutput& s) { return s.trial_id() == t.trial_id(); });
    if (!present) trials.push_back(t);
  }
  SortTrials(trials, job.spec().training_input().hyperparameters().goal());
  output.clear_trials();
  for (v1::HyperparameterOutput& t : trials) *output.add_trials() = std::move(t);
  nlohmann::json output_json = ToJson(output);
  if (!output_json.empty()) resource["trainingOutput"] = output_json;
  return resource;
}

std::string EarlyStoppingRule(const nlohmann::json& hp) {
  const v1::EarlyStoppingSpec stopping = StoppingOf(hp);
  if (Halving(stopping)) {
    return absl::StrCat("successive halving (reduction factor ", tuner::ReductionFactor(stopping),
                        "; rungs at ", RungAt(stopping, 0), ", ", RungAt(stopping, 1), ", ",
                        RungAt(stopping, 2), ", ...",
                        stopping.pause_at_rungs() ? "; trials pause at rungs" : "", ")");
  }
  if (hp.value("enableTrialEarlyStopping", false) ||
      stopping.algorithm() == v1::EarlyStoppingSpec::MEDIAN) {
    return "median rule";
  }
  return "";
}

std::string StoppedAtEachRung(const nlohmann::json& hp, const nlohmann::json& trials) {
  const v1::EarlyStoppingSpec stopping = StoppingOf(hp);
  if (!Halving(stopping)) return "";
  std::map<size_t, int> stopped;
  for (const auto& t : trials) {
    const size_t rungs = t.value("rungMetrics", nlohmann::json::array()).size();
    if (t.value("isTrialStoppedEarly", false) && rungs > 0) ++stopped[rungs - 1];
  }
  std::vector<std::string> counts;
  for (const auto& [rung, count] : stopped) {
    counts.push_back(absl::StrCat("rung ", rung, " (", RungAt(stopping, rung), "): ", count));
  }
  return counts.empty() ? "none" : absl::StrJoin(counts, ", ");
}

std::string SummarizeJob(const nlohmann::json& resource) {
  std::string out;
  out += "Overview\n";
  std::vector<std::vector<std::string>> overview = {
      {"JOB_ID", "STATE", "CREATED", "STARTED", "ENDED"}};
  overview.push_back({Str(resource.value("jobId", nlohmann::json())),
                      Str(resource.value("state", nlohmann::json())),
                      Str(resource.value("createTime", nlohmann::json())),
                      Str(resource.value("startTime", nlohmann::json())),
                      Str(resource.value("endTime", nlohmann::json()))});
  out += Table(overview);
  if (resource.contains("errorMessage")) out += "ERROR: " + Str(resource["errorMessage"]) + "\n";
  if (resource.contains("outputLocation"))
    out += "OUTPUTS: " + OutputsLine(resource["outputLocation"]) + "\n";
  if (resource.contains("queued")) {
    const nlohmann::json position = resource["queued"].value("position", nlohmann::json());
    out += "QUEUED" + (position.is_null() ? "" : ", position " + Str(position)) + ": " +
           Str(resource["queued"].value("reason", nlohmann::json())) + ": " +
           Str(resource["queued"].value("message", nlohmann::json())) + "\n";
  }
  if (resource.contains("waiting")) {
    out += "WAITING: " + Str(resource["waiting"].value("reason", nlohmann::json())) + ": " +
           Str(resource["waiting"].value("message", nlohmann::json())) + "\n";
  }
  if (resource.contains("warning")) out += "WARNING: " + Str(resource["warning"]) + "\n";

  const nlohmann::json input = resource.value("trainingInput", nlohmann::json::object());
  out += "\nTraining input\n";
  std::vector<std::vector<std::string>> input_rows = {{"FIELD", "VALUE"}};
  for (const auto& [key, value] : input.items()) {
    if (key == "hyperparameters") continue;
    if (value.is_array()) {
      std::vector<std::string> parts;
      for (const auto& v : value) parts.push_back(Str(v));
      input_rows.push_back({key, absl::StrJoin(parts, " ")});
    } else {
      input_rows.push_back({key, Str(value)});
    }
  }
  out += Table(input_rows);
  if (input.contains("hyperparameters")) {
    const nlohmann::json& hp = input["hyperparameters"];
    out += "\nHyperparameters (goal " + Str(hp.value("goal", nlohmann::json("MAXIMIZE"))) +
           ", maxTrials " + Str(hp.value("maxTrials", nlohmann::json(1))) + ", maxParallelTrials " +
           Str(hp.value("maxParallelTrials", nlohmann::json(1))) + ")\n";
    std::vector<std::vector<std::string>> params = {
        {"PARAMETER", "TYPE", "MIN", "MAX", "SCALE", "VALUES"}};
    for (const auto& p : hp.value("params", nlohmann::json::array())) {
      std::vector<std::string> values;
      for (const auto& v : p.value("categoricalValues", nlohmann::json::array()))
        values.push_back(Str(v));
      for (const auto& v : p.value("discreteValues", nlohmann::json::array()))
        values.push_back(Str(v));
      params.push_back(
          {Str(p.value("parameterName", nlohmann::json())), Str(p.value("type", nlohmann::json())),
           Str(p.value("minValue", nlohmann::json())), Str(p.value("maxValue", nlohmann::json())),
           Str(p.value("scaleType", nlohmann::json())), absl::StrJoin(values, ",")});
    }
    out += Table(params);
    if (const std::string rule = EarlyStoppingRule(hp); !rule.empty()) {
      out += "Early stopping: " + rule + "\n";
    }
  }
  if (resource.contains("trainingOutput")) {
    const nlohmann::json& output = resource["trainingOutput"];
    out += "\nTraining output\n";
    std::vector<std::vector<std::string>> rows = {{"FIELD", "VALUE"}};
    for (const auto& [key, value] : output.items()) {
      if (key != "trials") rows.push_back({key, Str(value)});
    }
    out += Table(rows);
    if (output.contains("trials")) {
      out += "\nTrials (best first)\n";
      const nlohmann::json hp = input.value("hyperparameters", nlohmann::json::object());
      const v1::EarlyStoppingSpec stopping = StoppingOf(hp);
      std::vector<std::vector<std::string>> trials = {
          {"TRIAL_ID", "STATE", "OBJECTIVE", "STEP", "HYPERPARAMETERS", "OUTPUT", "NOTE"}};
      for (const auto& t : output["trials"]) {
        std::vector<std::string> hps;
        const nlohmann::json hyperparameters = t.value("hyperparameters", nlohmann::json::object());
        for (const auto& [name, value] : hyperparameters.items()) {
          hps.push_back(name + "=" + Str(value));
        }
        const nlohmann::json metric = t.value("finalMetric", nlohmann::json::object());
        std::string note = t.value("isTrialStoppedEarly", false) ? "stopped early" : "";
        const size_t rungs = t.value("rungMetrics", nlohmann::json::array()).size();
        if (!note.empty() && rungs > 0) {
          absl::StrAppend(&note, " at rung ", rungs - 1, " (", RungAt(stopping, rungs - 1), ")");
        }
        if (t.value("paused", false) && rungs > 0) {
          note = absl::StrCat("paused at rung ", rungs - 1, " (", RungAt(stopping, rungs - 1),
                              "): resumes if it earns rung ", rungs);
        }
        if (t.contains("errorMessage")) note = Str(t["errorMessage"]);
        if (t.value("awaitingAdmission", false)) {
          // With pauseAtRungs a trial resumed from its pause waits too.
          note = stopping.pause_at_rungs()
                     ? "waits to be admitted again (its gang was released, or it resumes from a "
                       "pause)"
                     : "gang released (a replica could not be placed): waits to be admitted again";
        }
        trials.push_back(
            {Str(t.value("trialId", nlohmann::json())), Str(t.value("state", nlohmann::json())),
             Str(metric.value("objectiveValue", nlohmann::json())),
             Str(metric.value("trainingStep", nlohmann::json())), absl::StrJoin(hps, " "),
             Str(t.value("outputPath", nlohmann::json())), note});
      }
      out += Table(trials);
      if (const std::string stopped = StoppedAtEachRung(hp, output["trials"]); !stopped.empty()) {
        out += "Stopped at each rung: " + stopped + "\n";
      }
    }
  }
  return out;
}

namespace {

// The fatal messages of Python and most command-line tools, as they reach
// stderr: "/usr/bin/python3: Error while finding module ...",
// "ModuleNotFoundError: No module named 'trainer'", "sh: error: ...".
bool IsErrorReport(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon != absl::string_view::npos &&
      message.substr(0, colon).find(' ') == absl::string_view::npos) {
    const absl::string_view head = message.substr(0, colon);
    if (absl::EndsWith(head, "Error") || absl::EndsWith(head, "Exception")) return true;
    message.remove_prefix(colon + 2);  // a program's name
  }
  const std::string upper = absl::AsciiStrToUpper(message.substr(0, 5));
  return upper == "ERROR" || upper == "FATAL";
}

}  // namespace

std::string LogSeverity(bool from_stderr, const std::string& message) {
  const std::string upper = absl::AsciiStrToUpper(message.substr(0, 16));
  if (absl::StartsWith(upper, "ERROR") || absl::StartsWith(upper, "FATAL") ||
      absl::StartsWith(upper, "TRACEBACK") || absl::StartsWith(upper, "E ")) {
    return "ERROR";
  }
  if (absl::StartsWith(upper, "WARN") || absl::StartsWith(upper, "W ")) return "WARNING";
  if (from_stderr && IsErrorReport(message)) return "ERROR";
  return "INFO";
}

std::string EventTrial(const std::string& message) {
  // The reconciler's trial events start "trial <id>: " or "trial <id> ".
  if (!absl::StartsWith(message, "trial ")) return "";
  const size_t end = message.find_first_of(": ", 6);
  if (end == std::string::npos || end == 6) return "";
  const std::string id = message.substr(6, end - 6);
  return std::all_of(id.begin(), id.end(), [](char c) { return absl::ascii_isdigit(c); }) ? id : "";
}

std::string FormatLogEntry(const std::string& severity, double unix_seconds,
                           const std::string& task, const std::string& trial,
                           const std::string& message) {
  const absl::Time t = absl::FromUnixMicros(static_cast<int64_t>(std::llround(unix_seconds * 1e6)));
  return absl::StrCat(severity, "\t",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S +0000", t, absl::UTCTimeZone()), "\t",
                      task, "\t", trial, "\t", message);
}

absl::StatusOr<JobPredicate> ParseJobFilter(const std::string& filter) {
  std::vector<JobPredicate> terms;
  for (absl::string_view term : absl::StrSplit(filter, ' ', absl::SkipWhitespace())) {
    if (term == "AND") continue;
    size_t op = term.find_first_of("=:");
    if (op == absl::string_view::npos || op == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--filter: cannot read term \"", term,
                       "\": use KEY=VALUE or KEY:TEXT (keys: state, jobId, labels.KEY)"));
    }
    const std::string key(term.substr(0, op));
    const bool exact = term[op] == '=';
    const std::string value(term.substr(op + 1));
    auto compare = [exact, value](const std::string& field, bool fold) {
      std::string a = fold ? absl::AsciiStrToUpper(field) : field;
      std::string b = fold ? absl::AsciiStrToUpper(value) : value;
      return exact ? a == b : absl::StrContains(a, b);
    };
    if (key == "state" || key == "status") {
      terms.push_back([compare](const v1::TrainingJob& job) {
        v1::State s =
            job.status().state() == v1::STATE_UNSPECIFIED ? v1::QUEUED : job.status().state();
        return compare(v1::State_Name(s), true);
      });
    } else if (key == "jobId" || key == "name") {
      terms.push_back(
          [compare](const v1::TrainingJob& job) { return compare(job.metadata().name(), false); });
    } else if (absl::StartsWith(key, "labels.")) {
      const std::string label = key.substr(7);
      terms.push_back([compare, label](const v1::TrainingJob& job) {
        auto it = job.metadata().labels().find(label);
        return it != job.metadata().labels().end() && compare(it->second, false);
      });
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--filter: unknown key \"", key, "\" (keys: state, jobId, labels.KEY)"));
    }
  }
  return JobPredicate([terms](const v1::TrainingJob& job) {
    return std::all_of(terms.begin(), terms.end(), [&](const JobPredicate& p) { return p(job); });
  });
}

std::string HumanDuration(absl::Duration d) {
  const int64_t seconds = absl::ToInt64Seconds(d);
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return absl::StrCat(seconds, "s");
  const int64_t minutes = seconds / 60;
  if (minutes < 10) {
    return seconds % 60 == 0 ? absl::StrCat(minutes, "m")
                             : absl::StrCat(minutes, "m", seconds % 60, "s");
  }
  if (minutes < 60 * 3) return absl::StrCat(minutes, "m");
  const int64_t hours = minutes / 60;
  if (hours < 8) {
    return minutes % 60 == 0 ? absl::StrCat(hours, "h")
                             : absl::StrCat(hours, "h", minutes % 60, "m");
  }
  if (hours < 48) return absl::StrCat(hours, "h");
  if (hours < 24 * 8) {
    return hours % 24 == 0 ? absl::StrCat(hours / 24, "d")
                           : absl::StrCat(hours / 24, "d", hours % 24, "h");
  }
  if (hours < 24 * 365 * 2) return absl::StrCat(hours / 24, "d");
  if (hours < 24 * 365 * 8) {
    const int64_t days = (hours / 24) % 365;
    return days == 0 ? absl::StrCat(hours / 24 / 365, "y")
                     : absl::StrCat(hours / 24 / 365, "y", days, "d");
  }
  return absl::StrCat(hours / 24 / 365, "y");
}

std::string FormatEvents(const std::vector<JobEvent>& events, absl::Time now,
                         const std::string& line_prefix) {
  if (events.empty()) return line_prefix + "Events: <none>\n";
  std::vector<std::vector<std::string>> rows = {
      {"TYPE", "REASON", "AGE", "FROM", "OBJECT", "MESSAGE"}};
  for (const JobEvent& e : events) {
    std::string age =
        e.last_seen == absl::InfinitePast() ? "<unknown>" : HumanDuration(now - e.last_seen);
    if (e.count > 1 && e.first_seen != absl::InfinitePast()) {
      age = absl::StrCat(age, " (x", e.count, " over ", HumanDuration(now - e.first_seen), ")");
    }
    // One line per event: a multi-line message would break the table.
    std::string message = e.message;
    std::replace(message.begin(), message.end(), '\n', ' ');
    rows.push_back({e.type, e.reason, age, e.source, e.object, message});
  }
  std::string out = line_prefix + "Events:\n";
  for (absl::string_view line : absl::StrSplit(Table(rows), '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, line_prefix, "  ", line, "\n");
  }
  return out;
}

nlohmann::json EventsJson(const std::vector<JobEvent>& events) {
  auto time = [](absl::Time t) {
    return t == absl::InfinitePast()
               ? nlohmann::json()
               : nlohmann::json(absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", t, absl::UTCTimeZone()));
  };
  nlohmann::json out = nlohmann::json::array();
  for (const JobEvent& e : events) {
    out.push_back({{"type", e.type},
                   {"reason", e.reason},
                   {"object", e.object},
                   {"source", e.source},
                   {"message", e.message},
                   {"count", e.count},
                   {"firstTimestamp", time(e.first_seen)},
                   {"lastTimestamp", time(e.last_seen)}});
  }
  return out;
}

std::string ProgressLine(const v1::TrainingJob& job) {
  const v1::HyperparameterSpec& hp = job.spec().training_input().hyperparameters();
  if (hp.params_size() == 0) return "";
  const v1::TrainingOutput& output = job.status().training_output();
  int running = 0, failed = 0;
  const v1::HyperparameterOutput* best = nullptr;
  const bool minimize = hp.goal() == v1::HyperparameterSpec::MINIMIZE;
  for (const v1::HyperparameterOutput& t : output.trials()) {
    if (t.state() == v1::RUNNING || t.state() == v1::PREPARING || t.state() == v1::QUEUED)
      ++running;
    if (t.state() == v1::FAILED) ++failed;
    if (!t.has_final_metric()) continue;
    double v = t.final_metric().objective_value();
    if (best == nullptr || (minimize ? v < best->final_metric().objective_value()
                                     : v > best->final_metric().objective_value())) {
      best = &t;
    }
  }
  std::string line =
      absl::StrCat("trials: ", output.completed_trial_count(), "/", api::EffectiveMaxTrials(hp),
                   " completed, ", running, " running, ", failed, " failed");
  if (best != nullptr) {
    absl::StrAppend(&line, "; best objective ",
                    absl::StrFormat("%.4f", best->final_metric().objective_value()), " (trial ",
                    best->trial_id(), ")");
  }
  return line;
}

}  // namespace kubetrain::cli
