// A stand-in trainer for the local backend's integration tests: behaves like
// a Cloud ML trainer process in seconds, not minutes.
//
// Flags (others, and positional words such as "train", are ignored):
//   --x=V --y=V            the trial's hyperparameters; the objective is
//                          -(x-0.3)^2 - (y-0.7)^2 (y defaults to 0.7)
//   --sleep_ms=N           run this long before reporting (default 0)
//   --fail_once=PATH       exit 1 if PATH does not exist (creating it), so
//                          the first attempt fails and a restart succeeds
//   --spawn_child          start a child process that sleeps for a long time
//   --record_dir=DIR       append "<trial> <task> <pid> [<child pid>]" to
//                          DIR/runs (one line per start)
//   --curve_steps=N        report a learning curve instead: at steps 1..N
//                          the objective + 0.1 * step / N, one report every
//                          --curve_interval_ms (default 500)
// The master (or a process without TF_CONFIG) reports the objective at step
// 1 and step 2 through $CLOUD_ML_HP_METRIC_FILE, as cloudml-hypertune does
// (no report is marked final: the library cannot).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "common/hypertune/hypertune.h"

namespace {

std::string FlagValue(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

bool HasFlag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    if (("--" + name) == argv[i]) return true;
  }
  return false;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string tf_config = Env("TF_CONFIG");
  std::string task = "master";
  if (size_t at = tf_config.find("\"type\":\""); at != std::string::npos) {
    task = tf_config.substr(at + 8, tf_config.find('"', at + 8) - at - 8);
  }
  const std::string trial = Env("CLOUD_ML_TRIAL_ID");
  pid_t child = 0;
  if (HasFlag(argc, argv, "spawn_child")) {
    child = fork();
    if (child == 0) {
      execl("/bin/sleep", "sleep", "600", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  const std::string record_dir = FlagValue(argc, argv, "record_dir", "");
  if (!record_dir.empty()) {
    std::string line = (trial.empty() ? "-" : trial) + " " + task + " " + std::to_string(getpid());
    if (child > 0) line += " " + std::to_string(child);
    line += "\n";
    int fd = open((record_dir + "/runs").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      if (write(fd, line.data(), line.size()) < 0) return 3;
      close(fd);
    }
  }
  std::printf("fake trainer: task %s trial %s starting\n", task.c_str(), trial.c_str());
  std::fflush(stdout);
  const std::string fail_once = FlagValue(argc, argv, "fail_once", "");
  if (!fail_once.empty() && task == "master") {
    struct stat st;
    if (stat(fail_once.c_str(), &st) != 0) {
      std::ofstream(fail_once) << "failed once\n";
      std::fprintf(stderr, "ERROR: failing on purpose the first time\n");
      return 1;
    }
  }
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::atoi(FlagValue(argc, argv, "sleep_ms", "0").c_str())));
  if (task == "master" || task == "chief") {
    const double x = std::atof(FlagValue(argc, argv, "x", "0.3").c_str());
    const double y = std::atof(FlagValue(argc, argv, "y", "0.7").c_str());
    const double objective = -(x - 0.3) * (x - 0.3) - (y - 0.7) * (y - 0.7);
    auto writer = kubetrain::hypertune::HypertuneWriter::Create(
        kubetrain::hypertune::HypertuneWriter::OptionsFromEnvironment());
    if (!writer.ok()) {
      std::fprintf(stderr, "ERROR: %s\n", std::string(writer.status().message()).c_str());
      return 2;
    }
    const int curve_steps = std::atoi(FlagValue(argc, argv, "curve_steps", "0").c_str());
    if (curve_steps > 0) {
      const int interval = std::atoi(FlagValue(argc, argv, "curve_interval_ms", "500").c_str());
      for (int step = 1; step <= curve_steps; ++step) {
        if (step > 1) std::this_thread::sleep_for(std::chrono::milliseconds(interval));
        const double value = objective + 0.1 * step / curve_steps;
        (void)(*writer)->Report("", value, step);
        std::printf("fake trainer: step %d objective %.6f\n", step, value);
        std::fflush(stdout);
      }
    } else {
      (void)(*writer)->Report("", objective - 0.5, 1);
      (void)(*writer)->Report("", objective, 2);
      std::printf("fake trainer: objective %.6f\n", objective);
    }
  } else if (task == "ps") {
    // A parameter server serves until it is stopped, like a real one.
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (child > 0) kill(child, SIGTERM);
  return 0;
}
