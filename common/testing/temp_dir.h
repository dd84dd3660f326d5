#pragma once

#include <string>
#include <string_view>

namespace kubetrain::test_support {

// A fresh folder under $TMPDIR (mkdtemp), removed with everything in it when
// the TempDir goes out of scope. Tests that cannot create one have nothing
// to run on: the constructor aborts with the reason. Move-only.
class TempDir {
 public:
  // `prefix` names the folder (`<prefix>-XXXXXX`), so a leftover from a
  // killed test says which one left it.
  explicit TempDir(std::string_view prefix = "kubetrain-test");
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name.
  std::string Path(std::string_view name) const;

 private:
  void Remove();
  std::string path_;
};

// The whole of the file at `path`; empty when it cannot be read (a test
// compares it with what it expects, which then names the difference).
std::string ReadFile(const std::string& path);

}  // namespace kubetrain::test_support
