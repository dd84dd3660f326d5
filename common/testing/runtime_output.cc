#include "common/testing/runtime_output.h"

#include <regex>

#include "absl/strings/numbers.h"
#include "common/testing/temp_dir.h"

namespace kubetrain::test_support {

int64_t LatestCheckpointStep(const std::string& dir) {
  const std::string index = ReadFile(dir + "/checkpoint");
  const std::string key = "model_checkpoint_path: \"model.ckpt-";
  const size_t at = index.find(key);
  if (at == std::string::npos) return -1;
  const size_t start = at + key.size();
  int64_t step = -1;
  return absl::SimpleAtoi(index.substr(start, index.find('"', start) - start), &step) ? step : -1;
}

std::optional<FinalMetrics> LastFinalMetrics(const std::string& log) {
  static const std::regex line(
      R"(Final metrics after (\d+) steps, loss: ([-0-9.enaif]+), accuracy: ([0-9.]+))");
  std::optional<FinalMetrics> last;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    FinalMetrics m;
    if (absl::SimpleAtoi((*it)[1].str(), &m.step) && absl::SimpleAtod((*it)[2].str(), &m.loss) &&
        absl::SimpleAtod((*it)[3].str(), &m.accuracy)) {
      last = m;
    }
  }
  return last;
}

}  // namespace kubetrain::test_support
