#include "common/testing/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

namespace kubetrain::test_support {

TempDir::TempDir(std::string_view prefix) {
  std::error_code ec;
  std::filesystem::path root = std::filesystem::temp_directory_path(ec);
  if (ec) root = "/tmp";
  std::string pattern = (root / (std::string(prefix) + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "TempDir: cannot create a folder like %s: %s\n", pattern.c_str(),
                 std::strerror(errno));
    std::abort();
  }
  path_ = std::move(pattern);
}

TempDir::~TempDir() { Remove(); }

TempDir::TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, std::string())) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

std::string TempDir::Path(std::string_view name) const { return path_ + "/" + std::string(name); }

void TempDir::Remove() {
  if (path_.empty()) return;
  std::error_code ec;  // best effort: a folder a test made read-only stays
  std::filesystem::remove_all(path_, ec);
  path_.clear();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace kubetrain::test_support
