// `kubetrain ui` in a real browser (Debian's headless chromium through
// chromium-driver): against the local backend while a real tuning job of
// `kubetrain-runtime` runs, and against the fake Kubernetes API server. The
// tests assert on the DOM and the SVG of the pages and write a screenshot of
// each page (UI_SCREENSHOT_DIR, or $KUBETRAIN_UI_SCREENSHOTS when set).
// Skipped when chromium or chromium-driver is not installed.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "api/codec.h"
#include "common/observability/http_get.h"
#include "common/testing/child_process.h"
#include "common/testing/temp_dir.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/local/job_store.h"
#include "tests/fake_apiserver/fake_apiserver.h"
#include "tests/ui/webdriver.h"

namespace kubetrain::ui_testing {
namespace {

using ::testing::HasSubstr;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";
// What a job may carry to attack the page: if any of it ran, window.__xss
// would be set, or an <img> would exist.
constexpr char kScriptPayload[] = "<script>window.__xss=1</script>";
constexpr char kImgPayload[] = "\"><img src=x onerror=window.__xss=2>";

using test_support::ReadFile;

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct RunResult {
  int code = -1;
  std::string out;
};

// The screenshot folders: the build tree's, and a copy where the
// environment asks for one.
std::vector<std::string> ScreenshotDirs() {
  std::vector<std::string> dirs = {UI_SCREENSHOT_DIR};
  if (const char* extra = std::getenv("KUBETRAIN_UI_SCREENSHOTS"); extra != nullptr && *extra) {
    dirs.push_back(extra);
  }
  return dirs;
}

// The port of a URL the ui printed ("http://127.0.0.1:PORT/").
int PortOf(const std::string& url) {
  int port = 0;
  const size_t colon = url.rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(url.substr(colon + 1, url.find('/', colon) - colon - 1), &port)) {
    return 0;
  }
  return port;
}

// The local addresses listening on TCP `port` in this network namespace, as
// the kernel lists them (/proc/net/tcp and tcp6): "127.0.0.1", "0.0.0.0",
// "::"... A test of where a server really bound, whatever it prints.
std::vector<std::string> ListeningAddresses(int port) {
  std::vector<std::string> addresses;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(ReadFile(table));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = local.find(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
      // The address in the kernel's byte order, 32-bit words as hex.
      const std::string hex = local.substr(0, colon);
      std::string bytes;
      for (size_t word = 0; word + 8 <= hex.size(); word += 8) {
        const uint32_t value = static_cast<uint32_t>(std::stoul(hex.substr(word, 8), nullptr, 16));
        bytes.append(reinterpret_cast<const char*>(&value), 4);
      }
      char text[INET6_ADDRSTRLEN] = {};
      inet_ntop(bytes.size() == 4 ? AF_INET : AF_INET6, bytes.data(), text, sizeof(text));
      addresses.push_back(text);
    }
  }
  return addresses;
}

// What every page must hold after showing a job's data: none of its
// strings ran as script or became an element.
constexpr char kInjectionProbe[] = R"(
  return {
    xss: window.__xss === undefined ? null : String(window.__xss),
    images: document.querySelectorAll('img').length,
    withOnerror: document.querySelectorAll('[onerror]').length,
    scripts: Array.from(document.scripts).map((s) => s.getAttribute('src')),
  };)";

class UiBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!BrowserInstalled()) GTEST_SKIP() << "chromium or chromium-driver is not installed";
  }

  void TearDown() override {
    browser_.reset();
    if (ui_) ui_->Stop();
    // No local controller outlives the test.
    int pid = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(home_.path() + "/controller.lock")),
                         &pid) &&
        pid > 0) {
      kill(pid, SIGKILL);
    }
  }

  // `env` is "NAME=VALUE ..." for the command.
  RunResult Kubetrain(const std::vector<std::string>& args, const std::string& env) {
    std::string command = absl::StrCat(env, " ", Quote(KUBETRAIN_CLI));
    for (const std::string& a : args) absl::StrAppend(&command, " ", Quote(a));
    const std::string out = work_.path() + "/cmd.out";
    absl::StrAppend(&command, " >", Quote(out), " 2>&1 </dev/null");
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out)};
  }

  std::string LocalEnv() {
    return absl::StrCat("KUBETRAIN_BACKEND=local KUBETRAIN_HOME=", Quote(home_.path()));
  }

  // Starts `kubetrain ui ARGS` with `env` ({"NAME=VALUE"}) and returns the
  // URL it prints.
  std::string StartUi(const std::vector<std::string>& env, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back(KUBETRAIN_CLI);
    argv.push_back("ui");
    argv.insert(argv.end(), args.begin(), args.end());
    ui_ = std::make_unique<test_support::ChildProcess>(argv, work_.path() + "/ui.log");
    EXPECT_TRUE(ui_->Start().ok());
    std::string url;
    const bool printed = test_support::WaitUntil(
        [&] {
          std::smatch match;
          const std::string log = ui_->Log();
          static const std::regex kUrl("(http://127\\.0\\.0\\.1:[0-9]+/)");
          if (std::regex_search(log, match, kUrl)) url = match[1];
          return !url.empty() || ui_->Exited();
        },
        absl::Seconds(20));
    EXPECT_TRUE(printed && !url.empty()) << ui_->Log();
    return url;
  }

  void OpenBrowser() {
    auto browser = Browser::Start(work_.path(), 1280, 800);
    ASSERT_TRUE(browser.ok()) << browser.status();
    browser_ = *std::move(browser);
  }

  nlohmann::json Js(const std::string& script,
                    const nlohmann::json& args = nlohmann::json::array()) {
    auto value = browser_->Execute(script, args);
    EXPECT_TRUE(value.ok()) << value.status();
    return value.ok() ? *value : nlohmann::json();
  }

  void WaitJs(const std::string& script, absl::Duration limit = absl::Seconds(60),
              const nlohmann::json& args = nlohmann::json::array()) {
    auto value = browser_->WaitFor(script, limit, args);
    ASSERT_TRUE(value.ok()) << value.status() << "\n" << PageState();
  }

  // What the page shows and logged, for failure messages.
  std::string PageState() {
    std::string state;
    if (auto text =
            browser_->Execute("return document.getElementById('main').innerText.slice(0, 2000);");
        text.ok()) {
      absl::StrAppend(&state, "page text: ", text->dump(), "\n");
    }
    if (auto console = browser_->ConsoleMessages(); console.ok()) {
      absl::StrAppend(&state, "console: ", absl::StrJoin(*console, "\n  "));
    }
    return state;
  }

  // A screenshot of the window as it is, and one of the whole page when
  // `full_page` (the window grown to the page's height for a moment).
  void Screenshot(const std::string& name, bool full_page = false) {
    Js("window.scrollTo(0, 0);");
    auto write = [&](const std::string& file) {
      auto png = browser_->ScreenshotPng();
      ASSERT_TRUE(png.ok()) << png.status();
      ASSERT_GT(png->size(), 1000u);
      for (const std::string& dir : ScreenshotDirs()) {
        ASSERT_TRUE(WriteFile(dir + "/" + file, *png).ok()) << dir;
      }
    };
    write(name + ".png");
    if (full_page) {
      const nlohmann::json size =
          Js("return [window.outerWidth, document.documentElement.scrollHeight];");
      ASSERT_TRUE(browser_->SetWindowSize(size[0], std::min(6000, size[1].get<int>() + 100)).ok());
      write(name + "-full.png");
      ASSERT_TRUE(browser_->SetWindowSize(1280, 800).ok());
    }
  }

  void ExpectNothingInjected() {
    const nlohmann::json probe = Js(kInjectionProbe);
    EXPECT_TRUE(probe["xss"].is_null()) << probe;
    EXPECT_EQ(probe["images"], 0) << probe;
    EXPECT_EQ(probe["withOnerror"], 0) << probe;
    EXPECT_EQ(probe["scripts"], nlohmann::json({"/static/charts.js", "/static/app.js"})) << probe;
    auto alert = browser_->AlertText();
    EXPECT_EQ(alert.status().code(), absl::StatusCode::kNotFound)
        << "a dialog opened: " << alert.value_or("");
  }

  v1::TrainingJob StoredJob(const std::string& name) {
    auto store = local::JobStore::Open(home_.path() + "/jobs.db");
    EXPECT_TRUE(store.ok()) << store.status();
    auto job = (*store)->GetJob(name);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::TrainingJob();
  }

  std::string WriteConfig(const std::string& name, const std::string& yaml) {
    const std::string path = work_.path() + "/" + name;
    std::ofstream(path) << yaml;
    return path;
  }

  test_support::TempDir home_;
  test_support::TempDir work_;
  std::unique_ptr<test_support::ChildProcess> ui_;
  std::unique_ptr<Browser> browser_;
};

bool Terminal(v1::State s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

// The page's number formatting is the CLI's (nlohmann::json's dump), and its
// chart helpers behave; with no job, the jobs page says so.
TEST_F(UiBrowserTest, PageHelpersMatchTheCli) {
  const std::string url = StartUi({"KUBETRAIN_HOME=" + home_.path()}, {"--local"});
  ASSERT_FALSE(url.empty());
  // Without --address, the socket listens on 127.0.0.1 only.
  EXPECT_EQ(ListeningAddresses(PortOf(url)), std::vector<std::string>{"127.0.0.1"}) << url;
  OpenBrowser();
  ASSERT_TRUE(browser_->Navigate(url).ok());
  WaitJs(
      "return document.getElementById('no-jobs') && "
      "document.getElementById('no-jobs').textContent;");
  EXPECT_EQ(Js("return document.getElementById('no-jobs').textContent;"), "No jobs yet.");

  const std::vector<double> values = {
      0.8803999960422516,     0.88,   1.0, 0.1 + 0.2, 1e-5, 0.0001, 123456.789, -2.5, 1e15, 1e16,
      12345678901234567890.0, 3e-300, 0.5, -0.0001234};
  const nlohmann::json shown = Js("return arguments[0].map((v) => KTCharts.formatNumber(v));",
                                  nlohmann::json::array({nlohmann::json(values)}));
  for (size_t i = 0; i < values.size(); ++i) {
    // The CLI prints a value that went through protobuf's JSON mapping:
    // integral values come back as integers.
    const nlohmann::json cli = nlohmann::json::parse(nlohmann::json(values[i]).dump());
    const std::string expected = values[i] == std::floor(values[i]) && std::abs(values[i]) < 1e15
                                     ? std::to_string(static_cast<int64_t>(values[i]))
                                     : cli.dump();
    EXPECT_EQ(shown[i], expected) << values[i];
  }
  EXPECT_EQ(Js("return KTCharts.bestSoFar([{x:3,y:0.5},{x:1,y:0.7},{x:2,y:0.9}], "
               "'MAXIMIZE').map((p) => p.y);"),
            nlohmann::json({0.7, 0.9, 0.9}));
  EXPECT_EQ(Js("return KTCharts.bestSoFar([{x:1,y:0.7},{x:2,y:0.9},{x:3,y:0.5}], "
               "'MINIMIZE').map((p) => p.y);"),
            nlohmann::json({0.7, 0.7, 0.5}));
  EXPECT_EQ(Js("return KTCharts.logTicks(0.001, 0.05);"),
            nlohmann::json({0.001, 0.002, 0.005, 0.01, 0.02, 0.05}));
  EXPECT_EQ(Js("return KTCharts.logTicks(0.0001, 10);"),
            nlohmann::json({0.0001, 0.001, 0.01, 0.1, 1, 10}));
  EXPECT_EQ(Js("return KTCharts.niceTicks(0, 1, 5);"), nlohmann::json({0, 0.2, 0.4, 0.6, 0.8, 1}));
  EXPECT_EQ(Js("const s = KTCharts.logScale(0.001, 0.1, 0, 100); return [s(0.001), s(0.01), "
               "s(0.1)].map(Math.round);"),
            nlohmann::json({0, 50, 100}));
  EXPECT_EQ(Js("return [45, 185, 7500, 200000].map(KTCharts.formatDuration);"),
            nlohmann::json({"45s", "3m 05s", "2h 05m", "2d 07h"}));
  ExpectNothingInjected();
}

// A real sweep on the local backend: 4 trials of the built-in MLP, 2 at a
// time, followed live by the pages.
TEST_F(UiBrowserTest, LocalStudyLiveWhileItRuns) {
  if (!std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  }
  const std::string config =
      WriteConfig("study.yaml", absl::StrCat(R"(trainingInput:
  scaleTier: BASIC
  args:
    - --train_data_paths=)",
                                             kFashionMnist, R"(/train-images-idx3-ubyte.gz
    - --eval_data_paths=)",
                                             kFashionMnist, R"(/t10k-images-idx3-ubyte.gz
    - --model=mlp
    - --batch_size=32
    - --max_steps=400
    - --eval_every_secs=0.3
    - --log_every_steps=20
    - --save_checkpoints_secs=0
    - --threads=1
  jobDir: )",
                                             work_.path(), R"(/out
  hyperparameters:
    goal: MAXIMIZE
    maxTrials: 4
    maxParallelTrials: 2
    params:
      - {parameterName: hidden1, type: INTEGER, minValue: 16, maxValue: 64, scaleType: UNIT_LINEAR_SCALE}
      - {parameterName: learning_rate, type: DOUBLE, minValue: 0.001, maxValue: 0.05, scaleType: UNIT_LOG_SCALE}
      - {parameterName: optimizer, type: CATEGORICAL, categoricalValues: [adam, momentum]}
)"));
  const std::string url = StartUi({"KUBETRAIN_HOME=" + home_.path()}, {"--local"});
  ASSERT_FALSE(url.empty());
  EXPECT_THAT(ui_->Log(), HasSubstr("jobs of the local (" + home_.path() + "/jobs.db)"));
  OpenBrowser();
  ASSERT_TRUE(browser_->Navigate(url).ok());
  WaitJs("return document.getElementById('no-jobs');");

  RunResult submit =
      Kubetrain({"jobs", "submit", "training", "ui_live", "--config", config}, LocalEnv());
  ASSERT_EQ(submit.code, 0) << submit.out;

  // The jobs page lists it by itself (it polls), with its state and trials.
  WaitJs("return document.querySelector('#jobs-table tr[data-job=\"ui_live\"]');");
  const nlohmann::json row = Js(R"(
    const cells = document.querySelectorAll('#jobs-table tr[data-job="ui_live"] th, #jobs-table tr[data-job="ui_live"] td');
    return Array.from(cells).map((c) => c.textContent);)");
  EXPECT_EQ(row[0], "ui_live");
  EXPECT_THAT(std::string(row[1]), testing::AnyOf("QUEUED", "PREPARING", "RUNNING"));
  EXPECT_THAT(std::string(row[2]), testing::MatchesRegex("[0-9]/4"));
  WaitJs("return document.querySelector('#jobs-table tr[data-job=\"ui_live\"] .state-running');");
  EXPECT_EQ(Js("return document.getElementById('warning').textContent;"), "");  // a controller runs
  Screenshot("local-jobs-running");

  // The job's page, reached as a user does: by its link.
  Js("document.querySelector('#jobs-table a[href=\"#/jobs/ui_live\"]').click();");
  WaitJs(
      "return document.getElementById('trials-table') && "
      "document.getElementById('parallel-figure');");
  Js("window.__sameDocument = 'yes';");  // gone if the page reloads

  // The log of the first replica to write one follows by itself. (A trial
  // of 400 steps writes its log over a few seconds: the page's first read,
  // within a second of the first line, leaves lines still to come.)
  WaitJs("return document.querySelectorAll('#log-text .log-line').length > 0;", absl::Seconds(90));
  const int first_lines = Js("return document.querySelectorAll('#log-text .log-line').length;");

  // As trials finish, the page follows by itself: every new objective
  // becomes a new mark without a reload, waited for with a deadline (how
  // soon it shows on a loaded machine is printed, not asserted). (At least:
  // another trial may finish while the page catches up; the counts are
  // compared exactly once the sweep is over.)
  int seen = -1;
  absl::Duration slowest;
  int updates = 0;
  const absl::Time deadline = absl::Now() + absl::Minutes(4);
  for (;;) {
    const v1::TrainingJob job = StoredJob("ui_live");
    int with_objective = 0;
    for (const v1::HyperparameterOutput& t : job.status().training_output().trials()) {
      if (t.has_final_metric()) ++with_objective;
    }
    if (with_objective != seen) {
      const absl::Time changed = absl::Now();
      auto shown = browser_->WaitFor(
          "return document.querySelectorAll('#objective-figure circle.mark').length >= "
          "arguments[0];",
          absl::Seconds(10), {with_objective});
      ASSERT_TRUE(shown.ok()) << "the page did not show " << with_objective
                              << " marks: " << shown.status() << "\n"
                              << PageState() << "\nstore: " << api::EncodeJson(job);
      if (seen >= 0) {
        slowest = std::max(slowest, absl::Now() - changed);
        ++updates;
      }
      seen = with_objective;
    }
    if (Terminal(job.status().state())) break;
    ASSERT_LT(absl::Now(), deadline) << "the sweep did not end";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(updates, 2) << "the page was open while trials finished";
  std::cout << "[ live ] " << updates << " updates without reload, slowest " << slowest << "\n";
  EXPECT_EQ(Js("return window.__sameDocument;"), "yes");
  EXPECT_GT(Js("return document.querySelectorAll('#log-text .log-line').length;").get<int>(),
            first_lines)
      << "the followed log did not grow";

  // The finished study, against what the store and `jobs describe` say.
  const v1::TrainingJob job = StoredJob("ui_live");
  ASSERT_EQ(job.status().state(), v1::SUCCEEDED) << job.status().error_message();
  WaitJs(
      "return document.querySelector('#summary .state') && document.querySelector('#summary "
      ".state').textContent === 'SUCCEEDED';");
  const auto& trials = job.status().training_output().trials();
  ASSERT_EQ(trials.size(), 4);
  int finished = 0, with_curve = 0;
  for (const v1::HyperparameterOutput& t : trials) {
    if (Terminal(t.state())) ++finished;
    if (Terminal(t.state()) && t.all_metrics_size() > 0) ++with_curve;
  }
  EXPECT_EQ(finished, 4);
  EXPECT_EQ(seen, finished) << "a trial ended without an objective";
  EXPECT_EQ(with_curve, finished) << "a trial ended without a metric report";
  EXPECT_EQ(Js("return document.querySelectorAll('#trials-table tbody tr.trial-row').length;"), 4);
  EXPECT_EQ(Js("return document.querySelectorAll('#objective-figure circle.mark').length;"), seen);
  EXPECT_EQ(Js("return document.querySelectorAll('#objective-figure path.best-line').length;"), 1);
  EXPECT_EQ(Js(R"(return Array.from(document.querySelectorAll('#curves-figure g.curve'))
                   .filter((g) => ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(g.dataset.state)).length;)"),
            with_curve);
  EXPECT_EQ(
      Js("return document.querySelectorAll('#parallel-figure path.line[data-objective]').length;"),
      seen);
  EXPECT_EQ(Js("return document.querySelector('#parallel-figure "
               "g.parallel-axis[data-param=\"learning_rate\"]').dataset.scale;"),
            "log");
  EXPECT_EQ(Js("return document.querySelector('#parallel-figure "
               "g.parallel-axis[data-param=\"hidden1\"]').dataset.scale;"),
            "linear");
  EXPECT_EQ(
      Js(R"(return Array.from(document.querySelectorAll('#parallel-figure g.parallel-axis[data-param="optimizer"] text.category'))
                   .map((t) => t.firstChild.nodeValue);)"),
      nlohmann::json({"adam", "momentum"}));
  // At least one curve has several reports (an evaluation every 0.3 s).
  EXPECT_GT(
      Js(R"(return Math.max(...Array.from(document.querySelectorAll('#curves-figure g.curve path.curve-line'))
                   .map((p) => p.getAttribute('d').split('L').length));)")
          .get<int>(),
      1);

  // Objectives as the CLI prints them, best first by default.
  RunResult describe = Kubetrain({"jobs", "describe", "ui_live", "--format", "json"}, LocalEnv());
  ASSERT_EQ(describe.code, 0) << describe.out;
  const nlohmann::json resource = nlohmann::json::parse(describe.out);
  std::vector<std::string> cli_order;
  for (const nlohmann::json& t : resource["trainingOutput"]["trials"]) {
    cli_order.push_back(t["trialId"]);
    const nlohmann::json cells = Js(R"(
      return Array.from(document.querySelectorAll('#trials-table tr[data-trial="' + arguments[0] + '"] th, #trials-table tr[data-trial="' + arguments[0] + '"] td'))
        .map((c) => c.textContent);)",
                                    nlohmann::json::array({t["trialId"]}));
    EXPECT_EQ(cells[2], t["finalMetric"]["objectiveValue"].dump()) << t;
    EXPECT_EQ(cells[3], t["finalMetric"]["trainingStep"]) << t;
    EXPECT_EQ(cells[4], t["hyperparameters"]["hidden1"]) << t;
  }
  EXPECT_EQ(Js("return Array.from(document.querySelectorAll('#trials-table tbody tr')).map((r) => "
               "r.dataset.trial);"),
            nlohmann::json(cli_order));
  EXPECT_THAT(
      Js("return document.getElementById('best-objective').textContent;").get<std::string>(),
      HasSubstr(resource["trainingOutput"]["trials"][0]["finalMetric"]["objectiveValue"].dump()));

  // The JSON behind the pages, read on its own as docs/ui.md describes it:
  // the job is what `jobs describe --format json` prints.
  {
    const int port = PortOf(url);
    auto page = observability::HttpGet("127.0.0.1", port, "/api/jobs/ui_live");
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->status, 200);
    EXPECT_EQ(page->headers["content-type"], "application/json; charset=utf-8");
    const nlohmann::json body = nlohmann::json::parse(page->body);
    EXPECT_EQ(body["backend"], "local");
    EXPECT_EQ(body["job"], resource);
    EXPECT_EQ(body["study"]["completed"], 4);
    EXPECT_EQ(body["study"]["best"]["trialId"], resource["trainingOutput"]["trials"][0]["trialId"]);
    EXPECT_EQ(body["replicas"],
              nlohmann::json::parse(R"([{"role":"master","count":1,"machineType":"standard"}])"));
    ASSERT_FALSE(body["events"].empty());
    EXPECT_EQ(body["events"].back()["reason"], "JobSucceeded");

    auto list = observability::HttpGet("127.0.0.1", port, "/api/jobs?state=succeeded");
    ASSERT_TRUE(list.ok()) << list.status();
    const nlohmann::json jobs = nlohmann::json::parse(list->body)["jobs"];
    ASSERT_EQ(jobs.size(), 1u) << jobs;
    EXPECT_EQ(jobs[0]["jobId"], "ui_live");
    EXPECT_EQ(jobs[0]["trials"], nlohmann::json::parse(R"({"completed":4,"max":4})"));
    EXPECT_EQ(jobs[0]["bestObjective"],
              resource["trainingOutput"]["trials"][0]["finalMetric"]["objectiveValue"]);

    auto streams = observability::HttpGet("127.0.0.1", port, "/api/jobs/ui_live/logs");
    ASSERT_TRUE(streams.ok()) << streams.status();
    EXPECT_EQ(nlohmann::json::parse(streams->body)["streams"].size(), 4u) << streams->body;
    auto log = observability::HttpGet(
        "127.0.0.1", port, "/api/jobs/ui_live/log?trial=1&task=master-replica-0&lines=3");
    ASSERT_TRUE(log.ok()) << log.status();
    const nlohmann::json chunk = nlohmann::json::parse(log->body);
    EXPECT_EQ(chunk["lines"].size(), 3u) << log->body;
    EXPECT_GT(chunk["nextOffset"].get<int64_t>(), 0);
    // Read-only: a writing method is refused, and the job is as it was.
    auto post = observability::HttpExchange(
        "127.0.0.1", port,
        "DELETE /api/jobs/ui_live HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n");
    ASSERT_TRUE(post.ok()) << post.status();
    EXPECT_EQ(post->status, 405);
    // (Compared as JSON values: a map's fields come in any order.)
    EXPECT_EQ(nlohmann::json::parse(api::EncodeJson(StoredJob("ui_live"))),
              nlohmann::json::parse(api::EncodeJson(job)));
  }

  // Keyboard: a header button sorts, Enter again reverses, Tab moves on.
  Js("document.querySelector('#trials-table button[data-sort=\"trial\"]').focus();");
  ASSERT_TRUE(browser_->PressKeys({"\uE007"}).ok());
  EXPECT_EQ(Js("return Array.from(document.querySelectorAll('#trials-table tbody tr')).map((r) => "
               "r.dataset.trial);"),
            nlohmann::json({"1", "2", "3", "4"}));
  EXPECT_EQ(Js("return document.activeElement.dataset.sort;"),
            "trial");  // focus kept across the redraw
  EXPECT_EQ(Js("return document.querySelector('#trials-table "
               "button[data-sort=\"trial\"]').parentElement.getAttribute('aria-sort');"),
            "ascending");
  ASSERT_TRUE(browser_->PressKeys({"\uE007"}).ok());
  EXPECT_EQ(Js("return Array.from(document.querySelectorAll('#trials-table tbody tr')).map((r) => "
               "r.dataset.trial);"),
            nlohmann::json({"4", "3", "2", "1"}));
  ASSERT_TRUE(browser_->PressKeys({"\uE004"}).ok());
  EXPECT_EQ(Js("return document.activeElement.dataset.sort;"), "state");
  Js("document.querySelector('button[data-key=\"sort:reset\"]').click();");
  EXPECT_EQ(Js("return Array.from(document.querySelectorAll('#trials-table tbody tr')).map((r) => "
               "r.dataset.trial);"),
            nlohmann::json(cli_order));

  // The logs: the replica's own lines.
  const nlohmann::json streams =
      Js("return Array.from(document.querySelectorAll('#log-stream option')).map((o) => "
         "o.textContent);");
  EXPECT_EQ(streams.size(), 4u) << streams;
  EXPECT_EQ(streams[0], "trial 1 · master-replica-0");
  ExpectNothingInjected();
  Screenshot("local-job", /*full_page=*/true);

  // A narrow window: one column, nothing wider than the window (tables
  // scroll in their own boxes).
  ASSERT_TRUE(browser_->SetWindowSize(420, 900).ok());
  WaitJs("return window.innerWidth <= 420;");
  EXPECT_LE(Js("return document.documentElement.scrollWidth - window.innerWidth;").get<int>(), 0);
  Screenshot("local-job-narrow");
  ASSERT_TRUE(browser_->SetWindowSize(1280, 800).ok());

  // Back on the jobs page: the finished job, its trials and best objective.
  ASSERT_TRUE(browser_->Navigate(url).ok());
  WaitJs("return document.querySelector('#jobs-table tr[data-job=\"ui_live\"] .state-succeeded');");
  const nlohmann::json done = Js(R"(
    return Array.from(document.querySelectorAll('#jobs-table tr[data-job="ui_live"] th, #jobs-table tr[data-job="ui_live"] td')).map((c) => c.textContent);)");
  EXPECT_EQ(done[2], "4/4");
  EXPECT_EQ(done[3],
            resource["trainingOutput"]["trials"][0]["finalMetric"]["objectiveValue"].dump());
  // The state filter.
  Js("const s = document.getElementById('state-filter'); s.value = 'FAILED'; s.dispatchEvent(new "
     "Event('change'));");
  WaitJs(
      "return document.getElementById('no-jobs') && document.getElementById('no-jobs').textContent "
      "=== 'No FAILED jobs.';");
  Js("const s = document.getElementById('state-filter'); s.value = 'SUCCEEDED'; "
     "s.dispatchEvent(new Event('change'));");
  WaitJs("return document.querySelector('#jobs-table tr[data-job=\"ui_live\"]');");
  Screenshot("local-jobs");
}

// A job whose categorical values are markup: the trials that get them fail
// with those values in their error messages and logs. Everything shows as
// text; nothing runs.
TEST_F(UiBrowserTest, LocalJobValuesAreTextNeverMarkup) {
  if (!std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  }
  const std::string config =
      WriteConfig("xss.yaml", absl::StrCat(R"(trainingInput:
  scaleTier: BASIC
  args:
    - --train_data_paths=)",
                                           kFashionMnist, R"(/train-images-idx3-ubyte.gz
    - --eval_data_paths=)",
                                           kFashionMnist, R"(/t10k-images-idx3-ubyte.gz
    - --model=mlp
    - --max_steps=20
    - --save_checkpoints_secs=0
    - --threads=1
  jobDir: )",
                                           work_.path(), R"(/xss
  hyperparameters:
    algorithm: GRID_SEARCH
    maxTrials: 3
    maxParallelTrials: 3
    maxFailedTrials: 3
    params:
      - parameterName: optimizer
        type: CATEGORICAL
        categoricalValues: [adam, ')",
                                           kScriptPayload, "', '",
                                           absl::StrReplaceAll(kImgPayload, {{"'", "''"}}),
                                           R"(']
)"));
  RunResult submit = Kubetrain(
      {"jobs", "submit", "training", "xss_local", "--config", config, "--wait"}, LocalEnv());
  ASSERT_TRUE(submit.code == 0 || submit.code == 1) << submit.out;
  const v1::TrainingJob job = StoredJob("xss_local");
  ASSERT_TRUE(Terminal(job.status().state())) << job.status().ShortDebugString();
  // The attack is really in the data the page shows.
  std::string errors;
  for (const v1::HyperparameterOutput& t : job.status().training_output().trials())
    errors += t.error_message() + "\n";
  ASSERT_THAT(errors, HasSubstr(kScriptPayload));
  ASSERT_THAT(errors, HasSubstr(kImgPayload));

  const std::string url = StartUi({"KUBETRAIN_HOME=" + home_.path()}, {"--local"});
  ASSERT_FALSE(url.empty());
  OpenBrowser();
  ASSERT_TRUE(browser_->Navigate(url + "#/jobs/xss_local").ok());
  WaitJs("return document.querySelectorAll('#trials-table tbody tr').length === 3;");
  // Each value shows as itself: in the trial table, the parameters table,
  // the parallel-coordinates axis, the error messages and the logs.
  for (const std::string payload : {kScriptPayload, kImgPayload}) {
    const nlohmann::json found = Js(R"(
      const p = arguments[0];
      const cells = (sel) => Array.from(document.querySelectorAll(sel)).map((n) => n.textContent);
      return {
        table: cells('#trials-table td').filter((t) => t === p).length,
        params: cells('#params-table td').filter((t) => t.includes(p)).length,
        axis: cells('#parallel-figure g.parallel-axis[data-param="optimizer"] title').filter((t) => t === p).length,
        errors: cells('#trials-table .trial-error').filter((t) => t.includes(p)).length,
      };)",
                                    {payload});
    EXPECT_EQ(found["table"], 1) << payload << " " << found;
    EXPECT_EQ(found["params"], 1) << payload << " " << found;
    EXPECT_EQ(found["axis"], 1) << payload << " " << found;
    EXPECT_EQ(found["errors"], 1) << payload << " " << found;
  }
  // A failed trial's log holds the value in its error line.
  const nlohmann::json option = Js(R"(
    const opts = Array.from(document.querySelectorAll('#log-stream option'));
    const failed = Array.from(document.querySelectorAll('#trials-table tr.failed')).map((r) => r.dataset.trial);
    return opts.map((o) => o.value).filter((v) => failed.includes(v.split('\u0000')[0]));)");
  ASSERT_FALSE(option.empty());
  for (const nlohmann::json& value : option) {
    Js("const s = document.getElementById('log-stream'); s.value = arguments[0]; "
       "s.dispatchEvent(new Event('change'));",
       nlohmann::json::array({value}));
    WaitJs(
        "return Array.from(document.querySelectorAll('#log-text .log-line')).some((l) => "
        "l.textContent.includes(\"unknown optimizer\"));",
        absl::Seconds(20));
  }
  EXPECT_TRUE(Js(R"(
    const text = document.getElementById('log-text').textContent;
    return text.includes(arguments[0]) || text.includes(arguments[1]);)",
                 {kScriptPayload, kImgPayload})
                  .get<bool>());
  ExpectNothingInjected();
  Screenshot("local-xss-job", /*full_page=*/true);
}

// Cluster mode: the same pages over TrainingJobs and Events of the fake API
// server, read with the kubeconfig's credentials. The test writes status as
// the operator would.
TEST_F(UiBrowserTest, ClusterJobsOnTheFakeApiServer) {
  fake_apiserver::FakeApiServer::Options options;
  options.bearer_token = "user-token";
  auto server = fake_apiserver::FakeApiServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string kubeconfig =
      fake_apiserver::WriteKubeconfig(work_.path(), (*server)->url(), "user-token");
  const std::string env = absl::StrCat("KUBETRAIN_BACKEND= KUBECONFIG=", Quote(kubeconfig));
  const std::string config =
      WriteConfig("cluster.yaml", absl::StrCat(R"(trainingInput:
  scaleTier: STANDARD_1
  args: [--model=mlp, --max_steps=100]
  hyperparameters:
    goal: MINIMIZE
    maxTrials: 3
    maxParallelTrials: 1
    earlyStopping: {algorithm: SUCCESSIVE_HALVING, reductionFactor: 2}
    params:
      - {parameterName: learning_rate, type: DOUBLE, minValue: 0.0001, maxValue: 0.1, scaleType: UNIT_LOG_SCALE}
      - parameterName: activation
        type: CATEGORICAL
        categoricalValues: [relu, ')",
                                               kScriptPayload, "', '",
                                               absl::StrReplaceAll(kImgPayload, {{"'", "''"}}),
                                               R"(']
)"));
  RunResult submit =
      Kubetrain({"jobs", "submit", "training", "cluster_study", "--config", config}, env);
  ASSERT_EQ(submit.code, 0) << submit.out;

  // Times as an operator would have written them over the last minutes.
  const absl::Time t0 = absl::Now() - absl::Minutes(10);
  auto at = [&](absl::Duration since_t0) {
    return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t0 + since_t0, absl::UTCTimeZone());
  };
  auto trial = [&](int id, const std::string& activation, double lr, std::vector<double> curve,
                   bool stopped) {
    nlohmann::json t = {
        {"trialId", std::to_string(id)},
        {"hyperparameters", {{"learning_rate", absl::StrCat(lr)}, {"activation", activation}}},
        {"state", "SUCCEEDED"},
        {"startTime", at(absl::Minutes(2 * id))},
        {"endTime", at(absl::Minutes(2 * id) + absl::Seconds(100))},
        {"allMetrics", nlohmann::json::array()}};
    for (size_t i = 0; i < curve.size(); ++i) {
      t["allMetrics"].push_back(
          {{"trainingStep", std::to_string(10 * (i + 1))}, {"objectiveValue", curve[i]}});
    }
    t["finalMetric"] = t["allMetrics"].back();
    // Successive halving recorded it at every rung (reports 1, 2, 4, ...).
    t["rungMetrics"] = nlohmann::json::array();
    for (size_t rung = 1; rung <= curve.size(); rung *= 2) {
      t["rungMetrics"].push_back(t["allMetrics"][rung - 1]);
    }
    if (stopped) t["isTrialStoppedEarly"] = true;
    return t;
  };
  nlohmann::json trials = {
      trial(1, "relu", 0.01, {0.9, 0.6, 0.45}, false),
      trial(2, kScriptPayload, 0.0003, {1.2, 1.1}, true),
      {{"trialId", "3"},
       {"hyperparameters", {{"learning_rate", "0.05"}, {"activation", kImgPayload}}},
       {"state", "RUNNING"},
       {"startTime", at(absl::Minutes(6))}}};
  auto status = [&](const std::string& state, int completed) {
    nlohmann::json patch = nlohmann::json{
        {"status",
         {{"state", state},
          {"createTime", at(absl::ZeroDuration())},
          {"startTime", at(absl::Seconds(5))},
          {"conditions",
           {{{"type", "Running"},
             {"status", "True"},
             {"reason", "TrialsRunning"},
             {"message", std::string("a message with ") + kImgPayload},
             {"lastTransitionTime", at(absl::Seconds(6))}}}},
          {"replicaStatuses",
           {{"master", {{"active", 1}}}, {"worker", {{"active", 4}}}, {"ps", {{"active", 3}}}}},
          {"trainingOutput",
           {{"completedTrialCount", std::to_string(completed)},
            {"isHyperparameterTuningJob", true},
            {"trials", trials}}}}}};
    if (state == "SUCCEEDED") patch["status"]["endTime"] = at(absl::Minutes(9));
    return patch;
  };
  ASSERT_TRUE(
      (*server)
          ->MergePatch("trainingjobs", "ns1", "cluster-study", status("RUNNING", 2), "status")
          .ok());
  // Events as the operator and the kubelet write them: about this TrainingJob
  // (by its uid) and about one of its pods.
  auto stored = (*server)->Get("trainingjobs", "ns1", "cluster-study");
  ASSERT_TRUE(stored.ok()) << stored.status();
  const std::string uid = (*stored)["metadata"]["uid"];
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE((*server)
                  ->Create("events", "ns1",
                           {{"apiVersion", "v1"},
                            {"kind", "Event"},
                            {"metadata", {{"name", "cluster-study.1"}}},
                            {"involvedObject",
                             {{"kind", "TrainingJob"},
                              {"name", "cluster-study"},
                              {"namespace", "ns1"},
                              {"uid", uid}}},
                            {"source", {{"component", "kubetrain-operator"}}},
                            {"type", "Warning"},
                            {"reason", "TrialStoppedEarly"},
                            {"message", std::string("trial 2: ") + kScriptPayload},
                            {"lastTimestamp", at(absl::Seconds(330))}})
                  .ok());
  const std::string pod = "cluster-study-t3-master-0";
  ASSERT_TRUE((*server)
                  ->Create("pods", "ns1",
                           {{"apiVersion", "v1"},
                            {"kind", "Pod"},
                            {"metadata",
                             {{"name", pod},
                              {"labels",
                               {{"kubetrain.io/job-name", "cluster-study"},
                                {"kubetrain.io/replica-type", "master"},
                                {"kubetrain.io/replica-index", "0"},
                                {"kubetrain.io/trial-id", "3"}}},
                              {"ownerReferences",
                               {{{"apiVersion", "kubetrain.io/v1"},
                                 {"kind", "TrainingJob"},
                                 {"name", "cluster-study"},
                                 {"uid", uid},
                                 {"controller", true}}}}}},
                            {"spec", {{"containers", {{{"name", "kubetrain"}, {"image", "x"}}}}}}})
                  .ok());
  // Its training container has written a line, which the page reads through
  // pods/log (as text: the payload is shown, not run).
  ASSERT_TRUE((*server)->StartContainer("ns1", pod, "kubetrain").ok());
  ASSERT_TRUE(
      (*server)->AppendLog("ns1", pod, "kubetrain", std::string("step 1: ") + kScriptPayload).ok());
  ASSERT_TRUE(
      (*server)
          ->Create("events", "ns1",
                   {{"apiVersion", "v1"},
                    {"kind", "Event"},
                    {"metadata", {{"name", pod + ".1"}}},
                    {"involvedObject", {{"kind", "Pod"}, {"name", pod}, {"namespace", "ns1"}}},
                    {"source", {{"component", "default-scheduler"}}},
                    {"type", "Warning"},
                    {"reason", "FailedScheduling"},
                    {"message", std::string("0/3 nodes are available: ") + kImgPayload},
                    {"count", 4},
                    {"firstTimestamp", at(absl::Seconds(200))},
                    {"lastTimestamp", at(absl::Seconds(320))}})
          .ok());
  // A job whose id (kept in an annotation) is markup.
  ASSERT_TRUE(
      (*server)
          ->Create("trainingjobs", "ns1",
                   {{"apiVersion", "kubetrain.io/v1"},
                    {"kind", "TrainingJob"},
                    {"metadata",
                     {{"name", "odd-id"}, {"annotations", {{"kubetrain.io/job-id", kImgPayload}}}}},
                    {"spec", {{"trainingInput", {{"scaleTier", "BASIC"}}}}}})
          .ok());

  const std::string url = StartUi({"KUBETRAIN_BACKEND=", "KUBECONFIG=" + kubeconfig}, {});
  ASSERT_FALSE(url.empty());
  EXPECT_THAT(ui_->Log(), HasSubstr("jobs of the cluster (namespace ns1)"));
  OpenBrowser();
  ASSERT_TRUE(browser_->Navigate(url).ok());
  WaitJs("return document.querySelector('#jobs-table tr[data-job=\"cluster_study\"]');");
  EXPECT_EQ(Js("return document.querySelectorAll('#jobs-table tbody tr').length;"), 2);
  EXPECT_EQ(Js("return document.querySelector('#jobs-table tbody "
               "tr:not([data-job=\"cluster_study\"]) a').textContent;"),
            kImgPayload);
  const nlohmann::json row = Js(R"(
    return Array.from(document.querySelectorAll('#jobs-table tr[data-job="cluster_study"] th, #jobs-table tr[data-job="cluster_study"] td')).map((c) => c.textContent);)");
  EXPECT_EQ(row[1], "RUNNING");
  EXPECT_EQ(row[2], "2/3");
  EXPECT_EQ(row[3], "0.45");  // MINIMIZE: the lowest
  EXPECT_EQ(Js("return document.getElementById('backend').textContent;"),
            "cluster · namespace ns1");
  ExpectNothingInjected();
  Screenshot("cluster-jobs");

  Js("document.querySelector('#jobs-table a[href=\"#/jobs/cluster_study\"]').click();");
  WaitJs("return document.querySelectorAll('#trials-table tbody tr').length === 3;");
  Js("window.__sameDocument = 'yes';");
  EXPECT_EQ(Js("return Array.from(document.querySelectorAll('#trials-table tbody tr')).map((r) => "
               "r.dataset.trial);"),
            nlohmann::json({"1", "2", "3"}));  // best first for MINIMIZE, the running one last
  EXPECT_EQ(Js("return document.querySelectorAll('#objective-figure circle.mark').length;"), 2);
  EXPECT_EQ(
      Js("return document.querySelectorAll('#objective-figure circle.mark.stopped-early').length;"),
      1);
  EXPECT_EQ(Js("return document.querySelectorAll('#curves-figure g.curve').length;"), 2);
  EXPECT_EQ(Js("return document.querySelectorAll('#curves-figure "
               "g.curve[data-stopped-early=\"true\"]').length;"),
            1);
  EXPECT_EQ(
      Js("return document.querySelectorAll('#parallel-figure path.line[data-objective]').length;"),
      2);
  EXPECT_EQ(
      Js("return document.querySelectorAll('#parallel-figure path.line.no-objective').length;"), 1);
  EXPECT_EQ(Js("return document.querySelector('#parallel-figure "
               "g.parallel-axis[data-param=\"activation\"]').dataset.scale;"),
            "category");
  EXPECT_EQ(Js("return document.querySelector('#parallel-figure "
               "g.parallel-axis[data-param=\"learning_rate\"]').dataset.scale;"),
            "log");
  EXPECT_EQ(Js("return document.querySelector('#trials-table tr[data-trial=\"2\"] "
               ".badge-stopped').textContent;"),
            "stopped early at rung 1");
  EXPECT_EQ(Js("return document.getElementById('early-stopping').textContent;"),
            "successive halving (reduction factor 2; rungs at report 1, report 2, report 4, ...); "
            "stopped at each rung: rung 1 (report 2): 1");
  // Replicas from the tier, replica status, conditions and events.
  EXPECT_EQ(Js("return Array.from(document.querySelectorAll('#replicas-table tbody tr')).map((r) "
               "=> r.textContent);"),
            nlohmann::json({"master1standard", "worker4standard", "ps3standard"}));
  EXPECT_EQ(Js("return document.querySelectorAll('#replica-status-table tbody tr').length;"), 3);
  EXPECT_TRUE(Js("return Array.from(document.querySelectorAll('#conditions-table td')).some((c) => "
                 "c.textContent === 'a message with ' + arguments[0]);",
                 {kImgPayload})
                  .get<bool>());
  // Newest first: the job's own event, then its pod's (seen 4 times).
  const nlohmann::json event_rows = Js(R"(
    return Array.from(document.querySelectorAll('#events-table tbody tr')).map((r) =>
      Array.from(r.cells).map((c) => c.textContent));)");
  ASSERT_EQ(event_rows.size(), 2u) << event_rows;
  EXPECT_EQ(event_rows[0][1], "Warning");
  EXPECT_EQ(event_rows[0][2], "TrialStoppedEarly");
  EXPECT_EQ(event_rows[0][3], "trainingjob/cluster-study");
  EXPECT_EQ(event_rows[0][4], "2");
  EXPECT_EQ(event_rows[0][5], std::string("trial 2: ") + kScriptPayload);
  EXPECT_THAT(event_rows[1][0].get<std::string>(), HasSubstr("(×4)"));
  EXPECT_EQ(event_rows[1][2], "FailedScheduling");
  EXPECT_EQ(event_rows[1][3], "pod/" + pod);
  EXPECT_EQ(event_rows[1][5], std::string("0/3 nodes are available: ") + kImgPayload);
  // The events endpoint's are those `jobs describe` lists, each with its trial.
  {
    RunResult describe = Kubetrain({"jobs", "describe", "cluster_study", "--format", "json"}, env);
    ASSERT_EQ(describe.code, 0) << describe.out;
    const nlohmann::json described = nlohmann::json::parse(describe.out);
    auto page = observability::HttpGet("127.0.0.1", PortOf(url), "/api/jobs/cluster_study");
    ASSERT_TRUE(page.ok()) << page.status();
    nlohmann::json events = nlohmann::json::parse(page->body)["events"];
    ASSERT_EQ(events.size(), 2u) << events;
    EXPECT_EQ(events[1]["trial"], "2");
    for (nlohmann::json& e : events) e.erase("trial");
    EXPECT_EQ(events, described["events"]);
  }
  // The replica's log, read through the API server.
  WaitJs("return document.querySelectorAll('#log-text .log-line').length > 0;");
  EXPECT_EQ(Js("return Array.from(document.querySelectorAll('#log-stream option')).map((o) => "
               "o.textContent);"),
            nlohmann::json({"trial 3 · master-replica-0"}));
  EXPECT_THAT(
      Js("return document.querySelector('#log-text .log-line').textContent;").get<std::string>(),
      HasSubstr(std::string("INFO step 1: ") + kScriptPayload));
  ExpectNothingInjected();
  Screenshot("cluster-job", /*full_page=*/true);

  // The operator finishes trial 3: the page follows without a reload.
  trials[2] = trial(3, kImgPayload, 0.05, {0.7, 0.3}, false);
  trials[2]["errorMessage"] = std::string("replica master-0: ") + kScriptPayload;
  ASSERT_TRUE(
      (*server)
          ->MergePatch("trainingjobs", "ns1", "cluster-study", status("SUCCEEDED", 3), "status")
          .ok());
  const absl::Time changed = absl::Now();
  WaitJs("return document.querySelectorAll('#objective-figure circle.mark').length === 3;",
         absl::Seconds(10));
  const absl::Duration latency = absl::Now() - changed;
  EXPECT_LE(latency, absl::Seconds(2));
  std::cout << "[ live ] cluster update shown after " << latency << "\n";
  EXPECT_EQ(Js("return window.__sameDocument;"), "yes");
  EXPECT_EQ(Js("return Array.from(document.querySelectorAll('#trials-table tbody tr')).map((r) => "
               "r.dataset.trial);"),
            nlohmann::json({"3", "1", "2"}));
  EXPECT_EQ(Js("return document.querySelector('#trials-table tr[data-trial=\"3\"] "
               ".trial-error').textContent;"),
            std::string("replica master-0: ") + kScriptPayload);
  ExpectNothingInjected();

  // The odd job's page: not found under that name, said as text.
  ASSERT_TRUE(
      browser_->Navigate(url + "#/jobs/" + "%22%3E%3Cimg%20src%3Dx%20onerror%3Dwindow.__xss%3D2%3E")
          .ok());
  WaitJs("return document.querySelector('#main .error');");
  EXPECT_THAT(Js("return document.querySelector('#main .error').textContent;").get<std::string>(),
              HasSubstr(kImgPayload));
  ExpectNothingInjected();
}

}  // namespace
}  // namespace kubetrain::ui_testing
