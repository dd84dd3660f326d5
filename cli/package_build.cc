#include "cli/package_build.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/process/process.h"

namespace kubetrain::cli {
namespace {

namespace fs = std::filesystem;

// How much of setuptools' output a failure quotes.
constexpr size_t kOutputTailLines = 15;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Tail(const std::string& text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.size() > kOutputTailLines) lines.erase(lines.begin(), lines.end() - kOutputTailLines);
  return absl::StrJoin(lines, "\n");
}

// Removes the folder when it goes out of scope.
struct TempDir {
  fs::path path;
  ~TempDir() {
    std::error_code ignored;
    if (!path.empty()) fs::remove_all(path, ignored);
  }
};

// Runs `argv` in `cwd`, stdout and stderr into `log`; its exit code (128+N
// after signal N), or an error when it cannot be started.
absl::StatusOr<int> Run(std::vector<std::string> argv, const fs::path& cwd, const fs::path& log) {
  absl::StatusOr<process::ExitStatus> status = process::RunToExit({
      .argv = std::move(argv),
      .search_path = true,
      .cwd = cwd.string(),
      .in = process::Stream::DevNull(),
      .out = process::Stream::File(log.string()),
      .err = process::Stream::SameAsStdout(),
  });
  if (!status.ok()) return absl::FailedPreconditionError(status.status().message());
  return status->code();
}

// Copies the Python packages under `from` (folders and .py files; no
// __pycache__) to `to`.
absl::Status CopyPythonTree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", to.string(), ": ", ec.message()));
  for (const fs::directory_entry& entry : fs::directory_iterator(from, ec)) {
    const fs::path name = entry.path().filename();
    if (entry.is_directory()) {
      if (name == "__pycache__" || name.string().front() == '.') continue;
      if (absl::Status s = CopyPythonTree(entry.path(), to / name); !s.ok()) return s;
    } else if (entry.is_regular_file() && entry.path().extension() == ".py") {
      fs::copy_file(entry.path(), to / name, ec);
      if (ec) {
        return absl::InternalError(
            absl::StrCat("cannot copy ", entry.path().string(), ": ", ec.message()));
      }
    }
  }
  if (ec)
    return absl::InternalError(absl::StrCat("cannot read ", from.string(), ": ", ec.message()));
  return absl::OkStatus();
}

// An exclusive flock(2) on a folder while it lives: `setup.py sdist` makes its
// release tree (NAME-VERSION/) in the folder it runs in and removes it, so two
// builds of one folder at once (two submits, tests in parallel) would delete
// each other's; they take turns instead.
class FolderLock {
 public:
  explicit FolderLock(const fs::path& folder)
      : fd_(open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ >= 0) {
      while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FolderLock() {
    if (fd_ >= 0) close(fd_);
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<BuiltPackage> BuildSdist(const std::string& package_dir, const std::string& python) {
  std::error_code ec;
  fs::path dir = fs::absolute(package_dir, ec).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "trainer/" normalises to "trainer/"
  if (ec || !fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--package-path: ", package_dir, " is not a folder (the trainer's Python package)"));
  }
  const std::string name = dir.filename().string();
  std::string pattern = (fs::temp_directory_path(ec) / "kubetrain-sdist-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a folder like ", pattern, ": ", std::strerror(errno)));
  }
  TempDir work{pattern};
  const fs::path dist = work.path / "dist", log = work.path / "setup.log";
  fs::path context = dir.parent_path();
  std::vector<std::string> argv;
  if (fs::is_regular_file(context / "setup.py", ec)) {
    argv = {python,     "setup.py",     "-q",
            "egg_info", "--egg-base",   work.path.string(),
            "build",    "--build-base", (work.path / "build").string(),
            "sdist",    "--dist-dir",   dist.string()};
  } else {
    context = work.path / "src";
    if (absl::Status s = CopyPythonTree(dir, context / name); !s.ok()) return s;
    std::ofstream(context / "setup.py")
        << "# Written by kubetrain for --package-path " << dir.string() << "\n"
        << "from setuptools import find_packages, setup\n\n"
        << "setup(name=\"" << name << "\", version=\"0.0.0\",\n"
        << "      packages=find_packages(include=[\"" << name << "\", \"" << name << ".*\"]))\n";
    argv = {python, "setup.py", "-q", "sdist", "--dist-dir", dist.string()};
  }
  // Only a build in the user's folder can meet another; a copy is its own.
  std::optional<FolderLock> lock;
  if (context != work.path / "src") lock.emplace(context);
  absl::StatusOr<int> code = Run(argv, context, log);
  lock.reset();
  if (!code.ok()) {
    return absl::Status(code.status().code(),
                        absl::StrCat("--package-path ", package_dir,
                                     ": cannot build the package: ", code.status().message()));
  }
  std::vector<fs::path> built;
  for (const fs::directory_entry& entry : fs::directory_iterator(dist, ec)) {
    if (absl::EndsWith(entry.path().filename().string(), ".tar.gz")) built.push_back(entry.path());
  }
  if (*code != 0 || built.size() != 1) {
    return absl::InternalError(absl::StrCat(
        "--package-path ", package_dir, ": building the package with ", python,
        " setup.py sdist (in ",
        context == work.path / "src" ? "a copy of the folder" : context.string(), ") ",
        *code != 0 ? absl::StrCat("exited with code ", *code) : "made no single .tar.gz",
        "; its output ends:\n", Tail(ReadFile(log))));
  }
  return BuiltPackage{built[0].filename().string(), ReadFile(built[0])};
}

}  // namespace kubetrain::cli
