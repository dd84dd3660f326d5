#pragma once

// The files of cli/ui/assets, built into the binary at compile time
// (embed_assets.cmake writes ui_assets.cc), so the pages need no network
// and no files beside the binary.

#include <string_view>

namespace kubetrain::cli::ui {

struct Asset {
  std::string_view name;  // "app.js"
  std::string_view content_type;
  std::string_view data;
};

// nullptr when there is no such file.
const Asset* FindAsset(std::string_view name);

}  // namespace kubetrain::cli::ui
