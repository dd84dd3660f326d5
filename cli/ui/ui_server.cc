#include "cli/ui/ui_server.h"

#include <arpa/inet.h>

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/ui/ui_api.h"
#include "cli/ui/ui_assets.h"
#include "nlohmann/json.hpp"

namespace kubetrain::cli::ui {

using observability::HttpReply;
using observability::HttpRequest;

namespace {

// Only this server's own files; no inline script or style, no other origin,
// no frames, no forms.
constexpr char kContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The lines one log read returns at most.
constexpr int kMaxLogLines = 2000;
constexpr int kDefaultLogLines = 200;

void AddSecurityHeaders(HttpReply* reply) {
  reply->headers.emplace_back("Content-Security-Policy", kContentSecurityPolicy);
  reply->headers.emplace_back("X-Content-Type-Options", "nosniff");
  reply->headers.emplace_back("X-Frame-Options", "DENY");
  reply->headers.emplace_back("Referrer-Policy", "no-referrer");
  reply->headers.emplace_back("Cross-Origin-Resource-Policy", "same-origin");
}

HttpReply Json(int status, const nlohmann::json& body) {
  HttpReply reply;
  reply.status = status;
  reply.content_type = "application/json; charset=utf-8";
  // Logs and messages may hold bytes that are not UTF-8: replaced, not thrown.
  reply.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return reply;
}

HttpReply Error(int status, absl::string_view message) {
  return Json(status, {{"error", std::string(message)}});
}

HttpReply FromStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return Error(404, status.message());
    case absl::StatusCode::kInvalidArgument:
      return Error(400, status.message());
    case absl::StatusCode::kUnimplemented:
      return Error(501, status.message());
    default:
      return Error(502, status.message());
  }
}

HttpReply AssetReply(const Asset& asset) {
  HttpReply reply;
  reply.content_type = std::string(asset.content_type);
  reply.body = std::string(asset.data);
  return reply;
}

// localhost, ::1 or an IPv4 address in 127.0.0.0/8 (an address, not a name
// that merely starts with "127.").
bool IsLoopback(absl::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr address{};
  return inet_pton(AF_INET, std::string(host).c_str(), &address) == 1 &&
         (ntohl(address.s_addr) >> 24) == 127;
}

// The host part of a Host header: "127.0.0.1:8080" -> "127.0.0.1",
// "[::1]:8080" -> "::1".
std::string HostOf(absl::string_view header) {
  if (absl::StartsWith(header, "[")) {
    const size_t end = header.find(']');
    return std::string(header.substr(1, end == absl::string_view::npos ? end : end - 1));
  }
  return absl::AsciiStrToLower(header.substr(0, header.rfind(':')));
}

// name=value pairs of a query string, decoded; nullopt when malformed.
std::optional<std::vector<std::pair<std::string, std::string>>> ParseQuery(
    const std::string& query) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (absl::string_view part : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    std::optional<std::string> name = PercentDecode(part.substr(0, eq), true);
    std::optional<std::string> value = PercentDecode(
        eq == absl::string_view::npos ? absl::string_view() : part.substr(eq + 1), true);
    if (!name || !value) return std::nullopt;
    pairs.emplace_back(*std::move(name), *std::move(value));
  }
  return pairs;
}

std::string QueryValue(const std::vector<std::pair<std::string, std::string>>& pairs,
                       const std::string& name) {
  for (auto it = pairs.rbegin(); it != pairs.rend(); ++it) {
    if (it->first == name) return it->second;
  }
  return "";
}

}  // namespace

std::optional<std::string> PercentDecode(absl::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      int value = 0;
      for (size_t k = 1; k <= 2; ++k) {
        const char h = text[i + k];
        if (!absl::ascii_isxdigit(h)) return std::nullopt;
        value = value * 16 + (absl::ascii_isdigit(h) ? h - '0' : absl::ascii_tolower(h) - 'a' + 10);
      }
      out.push_back(static_cast<char>(value));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<UiServer>> UiServer::Start(const Options& options,
                                                          std::unique_ptr<JobSource> source) {
  std::unique_ptr<UiServer> server(new UiServer());
  server->options_ = options;
  {
    absl::MutexLock lock(&server->source_mu_);
    server->source_ = std::move(source);
  }
  absl::StatusOr<std::unique_ptr<observability::HttpServer>> http =
      observability::HttpServer::Start(
          {.address = options.address, .threads = options.threads, .name = "ui"},
          [s = server.get()](const HttpRequest& request) { return s->Handle(request); });
  if (!http.ok()) return http.status();
  server->http_ = *std::move(http);
  // Bound to every interface (asked for with --address 0.0.0.0:PORT), the
  // server is meant to be reached under other names.
  server->check_host_ = IsLoopback(server->http_->host());
  return server;
}

UiServer::~UiServer() { http_.reset(); }

std::string UiServer::url() const {
  std::string host = http_->host();
  if (host.empty()) host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return absl::StrCat("http://", host, ":", port(), "/");
}

HttpReply UiServer::Handle(const HttpRequest& request) {
  HttpReply reply;
  auto host = request.headers.find("host");
  if (check_host_ && host != request.headers.end() && !IsLoopback(HostOf(host->second))) {
    reply =
        Error(403, absl::StrCat("this server answers requests to 127.0.0.1 or localhost, not to \"",
                                host->second, "\""));
  } else if (request.path == "/" || request.path == "/index.html") {
    reply = AssetReply(*FindAsset("index.html"));
  } else if (absl::StartsWith(request.path, "/static/")) {
    const Asset* asset = FindAsset(request.path.substr(8));
    reply = asset != nullptr && asset->name != "index.html"
                ? AssetReply(*asset)
                : Error(404, absl::StrCat("no file ", request.path));
  } else if (absl::StartsWith(request.path, "/api/")) {
    reply = HandleApi(request.path, request.query);
  } else {
    reply = Error(404, absl::StrCat("no page ", request.path));
  }
  AddSecurityHeaders(&reply);
  return reply;
}

HttpReply UiServer::HandleApi(const std::string& path, const std::string& query) {
  std::optional<std::vector<std::pair<std::string, std::string>>> params = ParseQuery(query);
  if (!params) return Error(400, "malformed query string");
  // /api/jobs[/ID[/logs|/log]]: segments decoded one by one, so an ID may
  // hold any character, '/' included.
  std::vector<std::string> segments;
  for (absl::string_view raw : absl::StrSplit(path.substr(5), '/')) {
    std::optional<std::string> segment = PercentDecode(raw, false);
    if (!segment) return Error(400, "malformed path");
    segments.push_back(*std::move(segment));
  }
  if (segments.empty() || segments[0] != "jobs" || segments.size() > 3) {
    return Error(404, absl::StrCat("no endpoint ", path));
  }
  const absl::Time now = options_.now();
  absl::MutexLock lock(&source_mu_);
  if (segments.size() == 1) {
    absl::StatusOr<std::optional<v1::State>> state = ParseStateFilter(QueryValue(*params, "state"));
    if (!state.ok()) return FromStatus(state.status());
    absl::StatusOr<std::vector<v1::TrainingJob>> jobs = source_->ListJobs();
    if (!jobs.ok()) return FromStatus(jobs.status());
    nlohmann::json body = JobListJson(*jobs, *state, now);
    body["backend"] = source_->backend();
    body["location"] = source_->location();
    if (std::string warning = source_->Warning(*jobs, now); !warning.empty())
      body["warning"] = warning;
    return Json(200, body);
  }
  const std::string& id = segments[1];
  if (id.empty()) return Error(404, "no job id in the path");
  if (segments.size() == 2) {
    absl::StatusOr<JobRecord> record = source_->GetJob(id);
    if (!record.ok()) return FromStatus(record.status());
    nlohmann::json body = JobPageJson(*record, now);
    body["backend"] = source_->backend();
    return Json(200, body);
  }
  if (segments[2] == "logs") {
    absl::StatusOr<std::vector<LogStream>> streams = source_->LogStreams(id);
    if (!streams.ok()) return FromStatus(streams.status());
    return Json(200, LogStreamsJson(*streams));
  }
  if (segments[2] == "log") {
    const LogStream stream{QueryValue(*params, "trial"), QueryValue(*params, "task")};
    if (stream.task.empty()) return Error(400, "task: name the log's task (master-replica-0)");
    int64_t offset = -1;
    if (const std::string text = QueryValue(*params, "offset"); !text.empty()) {
      if (!absl::SimpleAtoi(text, &offset) || offset < 0) {
        return Error(400, absl::StrCat("offset: a byte offset >= 0, got \"", text, "\""));
      }
    }
    int lines = kDefaultLogLines;
    if (const std::string text = QueryValue(*params, "lines"); !text.empty()) {
      if (!absl::SimpleAtoi(text, &lines) || lines < 1 || lines > kMaxLogLines) {
        return Error(400, absl::StrCat("lines: 1 to ", kMaxLogLines, ", got \"", text, "\""));
      }
    }
    absl::StatusOr<LogChunk> chunk = source_->ReadLog(id, stream, offset, lines);
    if (!chunk.ok()) return FromStatus(chunk.status());
    return Json(200, LogChunkJson(*chunk));
  }
  return Error(404, absl::StrCat("no endpoint ", path));
}

}  // namespace kubetrain::cli::ui
