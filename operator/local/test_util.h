#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace kubetrain::local {

// A fresh folder under $TMPDIR, removed with its content at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kubetrain-local-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kubetrain::local
