#include "cli/ui/job_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"

namespace kubetrain::cli::ui {

void SortLogStreams(std::vector<LogStream>& streams) {
  auto trial_number = [](const std::string& trial) {
    int64_t n = -1;
    return absl::SimpleAtoi(trial, &n) ? n : -1;
  };
  std::sort(streams.begin(), streams.end(), [&](const LogStream& a, const LogStream& b) {
    const int64_t x = trial_number(a.trial), y = trial_number(b.trial);
    if (x != y) return x < y;
    if (a.trial != b.trial) return a.trial < b.trial;
    return a.task < b.task;
  });
}

LogChunk ChunkOfLog(absl::string_view data, int64_t start, bool tail, int max_lines,
                    const std::function<LogLine(absl::string_view)>& parse) {
  LogChunk chunk;
  // Whole lines only; a tail that starts mid-log drops its first, partial one.
  size_t begin = 0;
  if (tail && start > 0) {
    begin = data.find('\n');
    begin = begin == absl::string_view::npos ? data.size() : begin + 1;
    chunk.truncated = true;
  }
  std::vector<std::pair<size_t, size_t>> lines;  // [from, to) within data, '\n' excluded
  for (size_t at = begin; at < data.size();) {
    const size_t end = data.find('\n', at);
    if (end == absl::string_view::npos) break;  // still being written
    lines.emplace_back(at, end);
    at = end + 1;
  }
  size_t first = 0, last = lines.size();
  if (tail && lines.size() > static_cast<size_t>(max_lines)) {
    first = lines.size() - static_cast<size_t>(max_lines);
    chunk.truncated = true;
  } else if (!tail && lines.size() > static_cast<size_t>(max_lines)) {
    last = static_cast<size_t>(max_lines);
  }
  for (size_t i = first; i < last; ++i) {
    chunk.lines.push_back(parse(data.substr(lines[i].first, lines[i].second - lines[i].first)));
  }
  chunk.next_offset = last > 0 ? start + static_cast<int64_t>(lines[last - 1].second) + 1
                               : start + static_cast<int64_t>(begin);
  return chunk;
}

}  // namespace kubetrain::cli::ui
