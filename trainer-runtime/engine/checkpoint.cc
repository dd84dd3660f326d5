#include "trainer-runtime/engine/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/stable_hash.h"
#include "google/protobuf/text_format.h"

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

std::string ModelFingerprint(const v1::GraphDef& forward_graph, const std::string& optimizer) {
  // Text format prints map entries (node attributes) sorted by key, so the
  // same graph always gives the same text.
  std::string text;
  google::protobuf::TextFormat::PrintToString(forward_graph, &text);
  absl::StrAppend(&text, "\noptimizer: ", optimizer, "\n");
  return absl::StrFormat("%016x", StableHash(text));
}

v1::CheckpointOwner CheckpointOwnerFromEnvironment() {
  auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value == nullptr ? "" : value);
  };
  v1::CheckpointOwner owner;
  owner.set_job_uid(env("KUBETRAIN_JOB_UID"));
  owner.set_job_name(env("CLOUD_ML_JOB_ID"));
  owner.set_trial_id(env("CLOUD_ML_TRIAL_ID"));
  return owner;
}

std::string OwnFolderName(const v1::CheckpointOwner& me) {
  std::string uid;
  for (char c : me.job_uid()) {
    if (uid.size() == 8) break;
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) uid += c;
  }
  std::string name;
  for (char c : me.job_name()) {
    // A folder name, whatever the job's name holds.
    name += absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'
                ? c
                : '_';
  }
  if (name.empty()) name = "job";
  return absl::StrCat(name, "-", uid);
}

std::string DescribeOwner(const v1::CheckpointOwner& owner) {
  if (owner.job_uid().empty() && owner.model_fingerprint().empty()) {
    return "a run that recorded no owner";
  }
  std::string text = owner.job_uid().empty()
                         ? std::string("a run outside a job")
                         : absl::StrCat("job '", owner.job_name(), "' (uid ", owner.job_uid());
  if (!owner.job_uid().empty()) {
    if (!owner.trial_id().empty()) absl::StrAppend(&text, ", trial ", owner.trial_id());
    text += ")";
  }
  return text;
}

namespace {

// The latest checkpoint in `dir` with its path; none when there is none.
absl::StatusOr<std::optional<std::pair<std::string, v1::Checkpoint>>> Latest(
    const std::string& dir) {
  absl::StatusOr<std::optional<std::string>> path = LatestCheckpoint(dir);
  if (!path.ok()) return path.status();
  if (!path->has_value()) return std::optional<std::pair<std::string, v1::Checkpoint>>();
  absl::StatusOr<v1::Checkpoint> checkpoint = ReadCheckpoint(**path);
  if (!checkpoint.ok()) return checkpoint.status();
  return std::make_optional(std::make_pair(**path, *std::move(checkpoint)));
}

bool SameRun(const v1::CheckpointOwner& a, const v1::CheckpointOwner& b) {
  return a.job_uid() == b.job_uid() && a.trial_id() == b.trial_id();
}

bool SameModel(const v1::CheckpointOwner& written, const v1::CheckpointOwner& me) {
  return me.model_fingerprint().empty() || written.model_fingerprint() == me.model_fingerprint();
}

}  // namespace

absl::StatusOr<OutputFolder> ResolveOutputFolder(const std::string& requested,
                                                 const v1::CheckpointOwner& me) {
  auto found = Latest(requested);
  if (!found.ok()) return found.status();
  OutputFolder folder;
  folder.path = requested;
  if (!found->has_value()) return folder;
  const auto& [path, checkpoint] = **found;
  const v1::CheckpointOwner& owner = checkpoint.owner();
  const bool ownerless = !checkpoint.has_owner();

  if (me.job_uid().empty()) {
    // Rule 3: by hand.
    if (ownerless || (owner.job_uid().empty() && SameModel(owner, me))) {
      folder.latest = checkpoint;
      return folder;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "--output_path ", requested, " holds ", path, " of ", DescribeOwner(owner),
        owner.job_uid().empty()
            ? absl::StrCat(", not of this model (model fingerprint ", owner.model_fingerprint(),
                           ", this run's ", me.model_fingerprint(), ")")
            : "",
        ": a run resumes only from its own checkpoints; use another --output_path or remove "
        "that folder"));
  }

  // Rules 1 and 2: a job's replica.
  auto own_or_error = [&](const std::string& dir, const std::string& file,
                          const v1::Checkpoint& c) -> absl::Status {
    if (SameModel(c.owner(), me)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " holds ", file, " of this job's own run (", DescribeOwner(c.owner()),
        ") but this run's model has fingerprint ", me.model_fingerprint(),
        ": the model changed since that checkpoint; it is not restored into another model"));
  };
  if (!ownerless && SameRun(owner, me)) {
    if (absl::Status s = own_or_error(requested, path, checkpoint); !s.ok()) return s;
    folder.latest = checkpoint;
    return folder;
  }
  folder.path = (fs::path(requested) / OwnFolderName(me)).string();
  folder.moved_because =
      absl::StrCat(fs::path(path).filename().string(), " there is ", DescribeOwner(owner), "'s");
  auto mine = Latest(folder.path);
  if (!mine.ok()) return mine.status();
  if (mine->has_value()) {
    const auto& [own_path, own] = **mine;
    if (!own.has_owner() || !SameRun(own.owner(), me)) {
      return absl::FailedPreconditionError(
          absl::StrCat(folder.path, " (this job's own subfolder, as ", requested, " holds ", path,
                       " of ", DescribeOwner(owner), ") holds ", own_path, " of ",
                       DescribeOwner(own.owner()), ": not restored"));
    }
    if (absl::Status s = own_or_error(folder.path, own_path, own); !s.ok()) return s;
    folder.latest = own;
  }
  return folder;
}

}  // namespace kubetrain::runtime::engine
