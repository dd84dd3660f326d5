#pragma once

// A headless Debian chromium driven through chromium-driver (W3C WebDriver
// over HTTP on 127.0.0.1), for tests of kubetrain ui's pages: navigate, run
// script in the page, press keys, take screenshots.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/testing/child_process.h"
#include "nlohmann/json.hpp"

namespace web {
namespace http::client {
class http_client;
}
}  // namespace web

namespace kubetrain::ui_testing {

inline constexpr char kChromium[] = "/usr/bin/chromium";
inline constexpr char kChromeDriver[] = "/usr/bin/chromedriver";

// True when both chromium and chromium-driver are installed.
bool BrowserInstalled();

// One browser session. Not thread-safe.
class Browser {
 public:
  // Starts chromedriver on a free port (its log in `work_dir`) and a
  // headless chromium with a fresh profile under `work_dir`, its window
  // `width` x `height`. The browser reaches nothing but what the test
  // serves: no background networking, component updates, sync or QUIC.
  static absl::StatusOr<std::unique_ptr<Browser>> Start(const std::string& work_dir, int width,
                                                        int height);
  // Ends the session (chromium exits), then stops chromedriver.
  ~Browser();

  absl::Status Navigate(const std::string& url);
  // Runs `script` (a function body; `arguments` holds `args`) in the page
  // and returns what it returns.
  absl::StatusOr<nlohmann::json> Execute(const std::string& script,
                                         const nlohmann::json& args = nlohmann::json::array());
  // Runs `script` until it returns something truthy (not false, null, 0 or
  // ""), every 100 ms, for at most `limit`. DeadlineExceeded names the
  // script and its last value.
  absl::StatusOr<nlohmann::json> WaitFor(const std::string& script, absl::Duration limit,
                                         const nlohmann::json& args = nlohmann::json::array());
  // Key presses sent to the focused element, as a keyboard user types:
  // each string one key ("\uE004" Tab, "\uE007" Enter, or a character).
  absl::Status PressKeys(const std::vector<std::string>& keys);
  absl::Status SetWindowSize(int width, int height);
  // The viewport as a PNG.
  absl::StatusOr<std::string> ScreenshotPng();
  // The text of an open alert/confirm/prompt dialog, or nullopt-like "" with
  // NotFound when none is open.
  absl::StatusOr<std::string> AlertText();
  // Messages the page logged to the console (errors and CSP reports among
  // them), since the last call.
  absl::StatusOr<std::vector<std::string>> ConsoleMessages();

 private:
  Browser() = default;
  absl::StatusOr<nlohmann::json> Command(const std::string& method, const std::string& path,
                                         const nlohmann::json& body);

  std::unique_ptr<test_support::ChildProcess> driver_;
  std::unique_ptr<::web::http::client::http_client> client_;
  std::string session_;
};

// Writes `png` to `path` (and folders above it).
absl::Status WriteFile(const std::string& path, const std::string& data);

}  // namespace kubetrain::ui_testing
