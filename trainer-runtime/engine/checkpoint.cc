#include "trainer-runtime/engine/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kubetrain::runtime::engine {

namespace fs = std::filesystem;

namespace {

constexpr char kPrefix[] = "model.ckpt-";
constexpr char kIndexName[] = "checkpoint";

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("open folder", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync folder", dir);
  return absl::OkStatus();
}

std::optional<int64_t> StepOf(const std::string& file_name) {
  absl::string_view rest = file_name;
  if (!absl::ConsumePrefix(&rest, kPrefix)) return std::nullopt;
  int64_t step = 0;
  if (!absl::SimpleAtoi(rest, &step) || step < 0) return std::nullopt;
  return step;
}

// Checkpoint steps listed by the index, oldest first; empty when there is
// no index.
std::vector<int64_t> ReadIndex(const std::string& dir, std::optional<int64_t>* latest) {
  std::vector<int64_t> steps;
  std::ifstream in(fs::path(dir) / kIndexName);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    bool is_latest = absl::ConsumePrefix(&v, "model_checkpoint_path: ");
    if (!is_latest && !absl::ConsumePrefix(&v, "all_model_checkpoint_paths: ")) continue;
    v = absl::StripAsciiWhitespace(v);
    if (!absl::ConsumePrefix(&v, "\"") || !absl::ConsumeSuffix(&v, "\"")) continue;
    std::optional<int64_t> step = StepOf(std::string(fs::path(std::string(v)).filename()));
    if (!step) continue;
    if (is_latest) {
      *latest = step;
    } else {
      steps.push_back(*step);
    }
  }
  return steps;
}

}  // namespace

std::string CheckpointFileName(int64_t step) { return absl::StrCat(kPrefix, step); }

absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  fs::path target(path);
  std::string dir = target.parent_path().empty() ? "." : target.parent_path().string();
  std::string tmp = absl::StrCat(path, ".tmp-", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", tmp);
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = ErrnoError("write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = ErrnoError("fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoError("rename to", path);
    ::unlink(tmp.c_str());
    return s;
  }
  return FsyncDir(dir);
}

absl::Status SaveCheckpoint(const std::string& dir, const v1::Checkpoint& checkpoint, int keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("create folder ", dir, ": ", ec.message()));
  int64_t step = checkpoint.global_step();
  std::string data;
  if (!checkpoint.SerializeToString(&data)) {
    return absl::InternalError(absl::StrCat("cannot serialise checkpoint ", step));
  }
  absl::Status s = WriteFileAtomically((fs::path(dir) / CheckpointFileName(step)).string(), data);
  if (!s.ok()) return s;

  std::optional<int64_t> latest;
  std::vector<int64_t> steps = ReadIndex(dir, &latest);
  steps.erase(std::remove(steps.begin(), steps.end(), step), steps.end());
  steps.push_back(step);
  std::vector<int64_t> dropped;
  if (keep > 0 && static_cast<int>(steps.size()) > keep) {
    dropped.assign(steps.begin(), steps.end() - keep);
    steps.erase(steps.begin(), steps.end() - keep);
  }
  std::string index = absl::StrCat("model_checkpoint_path: \"", CheckpointFileName(step), "\"\n");
  for (int64_t s2 : steps) {
    absl::StrAppend(&index, "all_model_checkpoint_paths: \"", CheckpointFileName(s2), "\"\n");
  }
  s = WriteFileAtomically((fs::path(dir) / kIndexName).string(), index);
  if (!s.ok()) return s;
  // Only after the index stops naming them.
  for (int64_t old : dropped) fs::remove(fs::path(dir) / CheckpointFileName(old), ec);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::optional<std::string>();
  std::optional<int64_t> latest;
  ReadIndex(dir, &latest);
  if (latest) {
    fs::path p = fs::path(dir) / CheckpointFileName(*latest);
    if (fs::exists(p, ec)) return std::optional<std::string>(p.string());
  }
  std::optional<int64_t> best;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::optional<int64_t> step = StepOf(entry.path().filename().string());
    if (step && (!best || *step > *best)) best = step;
  }
  if (!best) return std::optional<std::string>();
  return std::optional<std::string>((fs::path(dir) / CheckpointFileName(*best)).string());
}

absl::StatusOr<v1::Checkpoint> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat("cannot open checkpoint ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  v1::Checkpoint checkpoint;
  if (!checkpoint.ParseFromString(buffer.str())) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " is corrupt (not a Checkpoint proto)"));
  }
  return checkpoint;
}

}  // namespace kubetrain::runtime::engine
