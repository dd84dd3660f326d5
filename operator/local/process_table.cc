#include "operator/local/process_table.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kubetrain::local {
namespace {

// Fields after the command name of /proc/<pid>/stat: [0] is field 3 (state).
std::optional<std::vector<std::string>> ProcStatFields(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;  // one line
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return std::nullopt;
  return absl::StrSplit(stat.substr(close_paren + 2), ' ', absl::SkipEmpty());
}

}  // namespace

bool GroupAlive(int pgid) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return kill(-pgid, 0) == 0;
  bool alive = false;
  while (dirent* entry = readdir(dir)) {
    int pid = 0;
    const char* name = entry->d_name;
    auto [end, ec] = std::from_chars(name, name + std::strlen(name), pid);
    if (ec != std::errc() || *end != '\0') continue;
    auto fields = ProcStatFields(pid);
    if (!fields.has_value() || fields->size() < 3) continue;
    if ((*fields)[0] == "Z" || (*fields)[0] == "X") continue;
    if ((*fields)[2] == std::to_string(pgid)) {
      alive = true;
      break;
    }
  }
  closedir(dir);
  return alive;
}

std::optional<uint64_t> ProcessStartTicks(int pid) {
  if (pid <= 0) return std::nullopt;
  auto fields = ProcStatFields(pid);
  if (!fields.has_value() || fields->size() < 20) return std::nullopt;
  if ((*fields)[0] == "Z" || (*fields)[0] == "X") return std::nullopt;
  uint64_t ticks = 0;
  if (!absl::SimpleAtoi((*fields)[19], &ticks)) return std::nullopt;
  return ticks;
}

bool ProcessAlive(int pid, uint64_t start_ticks) {
  std::optional<uint64_t> ticks = ProcessStartTicks(pid);
  return ticks.has_value() && (start_ticks == 0 || *ticks == start_ticks);
}

std::optional<std::string> FindExecutable(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path == nullptr ? "/usr/bin:/bin" : path, ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

}  // namespace kubetrain::local
