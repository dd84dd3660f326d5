#pragma once

// The cloudml-hypertune metric file: what Python trainers that call
// hypertune.HyperTune().report_hyperparameter_tuning_metric(...) write.
//
// Format (cloudml-hypertune 0.1.0.dev6, hypertune/hypertune.py): JSON lines,
// keys sorted, every value a string except `timestamp`, e.g.
//   {"global_step": "1000", "my_metric": "0.987", "timestamp": 1525851440.123456, "trial": "0"}
// The library keeps the last 100 reports and on every report truncates the
// file and rewrites all of them (open(path, 'w')), so a reader racing with it
// can see an empty file, a prefix of the new content, or (when the 100-report
// window slides) a mix of old and new content. The reader here tolerates all
// three: it skips lines that are not complete JSON objects, reads the file
// until two reads agree, and remembers which reports it has returned.
//
// One kubetrain extension: kubetrain-runtime marks the reports of its last
// evaluation with `"final": "true"` (training is over: the early-stopping
// rule does not judge that trial any more). The library never writes that
// key; a reader that does not know it ignores it (its value is not a
// number), and a metric named "final" with a number keeps being a metric.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kubetrain::hypertune {

inline constexpr char kMetricFileEnv[] = "CLOUD_ML_HP_METRIC_FILE";
inline constexpr char kTrialIdEnv[] = "CLOUD_ML_TRIAL_ID";
inline constexpr char kDefaultMetricPath[] = "/tmp/hypertune/output.metrics";
inline constexpr char kDefaultMetricTag[] = "training/hptuning/metric";
inline constexpr size_t kMaxReportsKept = 100;

// Python's repr() of a float (what str(float) and json.dumps print): the
// shortest digits that round-trip, fixed notation for 1e-4 <= |v| < 1e16 with
// at least one decimal ("1.0"), otherwise scientific with a two-digit
// exponent ("1e-05", "1.5e+16"); "nan", "inf", "-inf".
std::string PythonFloatRepr(double value);

// One report line as the library writes it, with its newline. `tag` empty
// means kDefaultMetricTag. A global_step of nullopt or 0 is written as "0"
// (the library's `str(int(global_step) if global_step else 0)`). `final`
// adds the extension key above.
std::string FormatHypertuneLine(std::string_view tag, double value,
                                std::optional<int64_t> global_step, std::string_view trial,
                                double timestamp, bool final = false);

// A parsed report line.
struct HypertuneReport {
  double timestamp = 0;     // 0 when absent
  std::string trial;        // "" when absent
  int64_t global_step = 0;  // 0 when absent or not an integer
  // Every other key whose value is a number or a string holding one
  // (Python's "nan"/"inf" included): normally just the metric tag.
  std::map<std::string, double> metrics;
  // `"final": "true"`: the trainer's last evaluation (see above).
  bool final = false;
  // Identity of the report: its canonical JSON (keys sorted, compact), so
  // the same report read twice, from a rewritten file, is recognised.
  std::string key;
};

// Parses a metric file's content, in file order. Lines that are not complete
// JSON objects (a truncated last line, garbage
// from a racing rewrite) are skipped, and counted in *skipped when given.
// Pure; never fails.
std::vector<HypertuneReport> ParseHypertuneFile(std::string_view content,
                                                size_t* skipped = nullptr);

// Returns each report once across successive polls of a file that is
// rewritten, truncated or read half-written in between. Not thread-safe.
//
// Memory is bounded: it remembers the keys of the last `remembered` reports
// it returned. A report older than that cannot come back, because the file
// holds only the last kMaxReportsKept, so remembered must be >= that.
class HypertuneFileFollower {
 public:
  explicit HypertuneFileFollower(size_t remembered = 10 * kMaxReportsKept);

  // Reports in `content` not returned before, in file order.
  std::vector<HypertuneReport> Poll(std::string_view content);

  // Reads `path` with ReadHypertuneFile and polls its content.
  absl::StatusOr<std::vector<HypertuneReport>> PollFile(const std::string& path);

 private:
  size_t remembered_;
  std::deque<std::string> order_;
  std::unordered_set<std::string> seen_;
};

// Reads the metric file, "" when it does not exist (yet). Because the writer
// truncates and rewrites in place, reads are repeated until two consecutive
// reads agree (up to a few tries), which avoids lines stitched together from
// two versions of the file. Errors other than absence name the path.
absl::StatusOr<std::string> ReadHypertuneFile(const std::string& path);

// Writes the metric file as the library does: keeps the last
// kMaxReportsKept lines and rewrites the whole file (truncate, write) on each
// report. Not thread-safe.
class HypertuneWriter {
 public:
  struct Options {
    std::string metric_path = kDefaultMetricPath;
    std::string trial_id = "0";
  };
  // $CLOUD_ML_HP_METRIC_FILE and $CLOUD_ML_TRIAL_ID, with the library's defaults.
  static Options OptionsFromEnvironment();

  // Creates the file's directory if missing (the library does too).
  static absl::StatusOr<std::unique_ptr<HypertuneWriter>> Create(Options options);

  // Appends a report stamped `timestamp` (seconds since the epoch) and
  // rewrites the file. `final` marks the trainer's last evaluation (the
  // extension above).
  absl::Status Report(std::string_view tag, double value, std::optional<int64_t> global_step,
                      double timestamp, bool final = false);
  // Same, stamped with the current time.
  absl::Status Report(std::string_view tag, double value, std::optional<int64_t> global_step);

  // What the file holds after the last Report.
  std::string Content() const;
  const std::string& path() const { return options_.metric_path; }

 private:
  explicit HypertuneWriter(Options options) : options_(std::move(options)) {}
  Options options_;
  std::deque<std::string> lines_;
};

}  // namespace kubetrain::hypertune
