#pragma once

// Running the kubetrain-runtime binary from a test, as a replica runs it.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kubetrain::runtime::cli_test {

// Runs `kubetrain-runtime ARGS` through the shell, with `env` (e.g.
// "env A=1 B=2") in front when given, stdout and stderr into `log`. The exit
// code, or -1 when it did not exit.
inline int RunBinary(const std::string& args, const std::string& log, const std::string& env = "") {
  std::string command = (env.empty() ? "" : env + " ") + std::string(KUBETRAIN_RUNTIME_BINARY) +
                        " " + args + " > " + log + " 2>&1";
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An empty directory of this process's own under the test's temp dir.
inline std::filesystem::path FreshTempDir(const std::string& name) {
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Two separable blobs, 200 rows of "x,y,label": a model learns them in a few
// steps.
inline void WriteTinyDataset(const std::filesystem::path& path) {
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 0.5);
  std::ofstream out(path);
  for (int i = 0; i < 200; ++i) {
    int label = i % 2;
    out << (label ? 1.5 : -1.5) + noise(rng) << "," << noise(rng) << "," << label << "\n";
  }
}

// `train` on `data` into `output`, small and single-threaded; evaluates only
// at the end.
inline std::string TinyTrainArgs(const std::filesystem::path& data,
                                 const std::filesystem::path& output, int max_steps) {
  return "train --train_data_paths=" + data.string() + " --output_path=" + output.string() +
         " --max_steps=" + std::to_string(max_steps) +
         " --batch_size=20 --hidden1=8 --hidden2=4 --threads=1 --seed=5 --eval_every_secs=0";
}

}  // namespace kubetrain::runtime::cli_test
