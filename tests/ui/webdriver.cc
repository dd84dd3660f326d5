#define _TURN_OFF_PLATFORM_STRING  // cpprest's U() macro collides with other headers
#include "tests/ui/webdriver.h"

#include <cpprest/http_client.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/wait_until.h"

namespace kubetrain::ui_testing {
namespace {

bool Truthy(const nlohmann::json& value) {
  if (value.is_null()) return false;
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number()) return value.get<double>() != 0;
  if (value.is_string()) return !value.get<std::string>().empty();
  return true;
}

// "ChromeDriver was started successfully on port 41235."
std::optional<int> DriverPort(const std::string& log) {
  const std::string marker = "started successfully on port ";
  const size_t at = log.find(marker);
  if (at == std::string::npos) return std::nullopt;
  int port = 0;
  const size_t from = at + marker.size();
  const size_t to = log.find_first_not_of("0123456789", from);
  if (!absl::SimpleAtoi(log.substr(from, to - from), &port) || port <= 0) return std::nullopt;
  return port;
}

}  // namespace

bool BrowserInstalled() { return access(kChromium, X_OK) == 0 && access(kChromeDriver, X_OK) == 0; }

absl::Status WriteFile(const std::string& path, const std::string& data) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Browser>> Browser::Start(const std::string& work_dir, int width,
                                                        int height) {
  std::unique_ptr<Browser> browser(new Browser());
  const std::string log = work_dir + "/chromedriver.log";
  browser->driver_ = std::make_unique<test_support::ChildProcess>(
      std::vector<std::string>{kChromeDriver, "--port=0"}, log);
  if (!browser->driver_->Start().ok()) return absl::UnavailableError("cannot start chromedriver");
  std::optional<int> port;
  test_support::WaitUntil(
      [&] {
        port = DriverPort(browser->driver_->Log());
        return port.has_value() || browser->driver_->Exited();
      },
      absl::Seconds(60), absl::Milliseconds(50));
  if (!port)
    return absl::UnavailableError("chromedriver did not start: " + browser->driver_->Log());
  ::web::http::client::http_client_config config;
  config.set_timeout(std::chrono::seconds(120));
  browser->client_ = std::make_unique<::web::http::client::http_client>(
      "http://127.0.0.1:" + std::to_string(*port), config);

  const std::string profile = work_dir + "/chromium-profile";
  std::filesystem::create_directories(profile);
  const nlohmann::json args = {"--headless",
                               "--no-sandbox",
                               "--disable-gpu",
                               "--disable-quic",
                               "--no-first-run",
                               "--disable-background-networking",
                               "--disable-component-update",
                               "--disable-sync",
                               "--disable-dev-shm-usage",
                               "--hide-scrollbars",
                               "--user-data-dir=" + profile,
                               absl::StrCat("--window-size=", width, ",", height)};
  const nlohmann::json capabilities = {
      {"capabilities",
       {{"alwaysMatch",
         {{"browserName", "chrome"},
          {"goog:chromeOptions", {{"binary", kChromium}, {"args", args}}},
          {"goog:loggingPrefs", {{"browser", "ALL"}}}}}}}};
  absl::StatusOr<nlohmann::json> session = browser->Command("POST", "/session", capabilities);
  if (!session.ok()) return session.status();
  browser->session_ = session->value("sessionId", "");
  if (browser->session_.empty()) {
    return absl::InternalError("chromedriver gave no session: " + session->dump());
  }
  return browser;
}

Browser::~Browser() {
  if (!session_.empty()) (void)Command("DELETE", "/session/" + session_, nullptr);
  client_.reset();
  if (driver_) driver_->Stop();
}

absl::StatusOr<nlohmann::json> Browser::Command(const std::string& method, const std::string& path,
                                                const nlohmann::json& body) {
  try {
    ::web::http::http_request request(method);
    request.set_request_uri(path);
    if (!body.is_null()) request.set_body(body.dump(), "application/json; charset=utf-8");
    ::web::http::http_response response = client_->request(request).get();
    const std::string text = response.extract_utf8string(true).get();
    nlohmann::json reply = nlohmann::json::parse(text, nullptr, false);
    if (reply.is_discarded() || !reply.is_object()) {
      return absl::InternalError(
          absl::StrCat(method, " ", path, ": not JSON: ", text.substr(0, 300)));
    }
    nlohmann::json value = reply.value("value", nlohmann::json());
    if (response.status_code() != 200) {
      const std::string error = value.is_object() ? value.value("error", "") : "";
      const std::string message = value.is_object() ? value.value("message", "") : text;
      const std::string what =
          absl::StrCat(method, " ", path, ": ", error, ": ", message.substr(0, 500));
      if (error == "no such alert") return absl::NotFoundError(what);
      return absl::InternalError(what);
    }
    return value;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(method, " ", path, ": ", e.what()));
  }
}

absl::Status Browser::Navigate(const std::string& url) {
  return Command("POST", "/session/" + session_ + "/url", {{"url", url}}).status();
}

absl::StatusOr<nlohmann::json> Browser::Execute(const std::string& script,
                                                const nlohmann::json& args) {
  return Command("POST", "/session/" + session_ + "/execute/sync",
                 {{"script", script}, {"args", args}});
}

absl::StatusOr<nlohmann::json> Browser::WaitFor(const std::string& script, absl::Duration limit,
                                                const nlohmann::json& args) {
  const absl::Time deadline = absl::Now() + limit;
  nlohmann::json last;
  for (;;) {
    absl::StatusOr<nlohmann::json> value = Execute(script, args);
    if (!value.ok()) return value.status();
    if (Truthy(*value)) return value;
    last = *value;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(limit),
                                                      " for `", script.substr(0, 300),
                                                      "`; last value ", last.dump()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::Status Browser::PressKeys(const std::vector<std::string>& keys) {
  nlohmann::json actions = nlohmann::json::array();
  for (const std::string& key : keys) {
    actions.push_back({{"type", "keyDown"}, {"value", key}});
    actions.push_back({{"type", "keyUp"}, {"value", key}});
  }
  return Command("POST", "/session/" + session_ + "/actions",
                 {{"actions", {{{"type", "key"}, {"id", "keyboard"}, {"actions", actions}}}}})
      .status();
}

absl::Status Browser::SetWindowSize(int width, int height) {
  return Command("POST", "/session/" + session_ + "/window/rect",
                 {{"width", width}, {"height", height}})
      .status();
}

absl::StatusOr<std::string> Browser::ScreenshotPng() {
  absl::StatusOr<nlohmann::json> value =
      Command("GET", "/session/" + session_ + "/screenshot", nullptr);
  if (!value.ok()) return value.status();
  std::string png;
  if (!value->is_string() || !absl::Base64Unescape(value->get<std::string>(), &png)) {
    return absl::InternalError("screenshot: not base64");
  }
  return png;
}

absl::StatusOr<std::string> Browser::AlertText() {
  absl::StatusOr<nlohmann::json> value =
      Command("GET", "/session/" + session_ + "/alert/text", nullptr);
  if (!value.ok()) return value.status();
  return value->is_string() ? value->get<std::string>() : value->dump();
}

absl::StatusOr<std::vector<std::string>> Browser::ConsoleMessages() {
  absl::StatusOr<nlohmann::json> value =
      Command("POST", "/session/" + session_ + "/se/log", {{"type", "browser"}});
  if (!value.ok()) return value.status();
  std::vector<std::string> messages;
  for (const nlohmann::json& entry : *value) {
    messages.push_back(entry.value("level", "") + ": " + entry.value("message", ""));
  }
  return messages;
}

}  // namespace kubetrain::ui_testing
