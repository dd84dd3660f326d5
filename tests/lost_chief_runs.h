#pragma once

// What the lost-chief tests of both backends share (docs/reconciler.md, "A
// chief lost at the end": tests/local/local_integration_test.cc on local
// processes, tests/operator/lost_chief_test.cc on the fake API server): the
// trainer's flags of the master + 2 workers + 1 ps job, and what a run is held
// to. Header-only, for tests.

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/runtime_output.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::lost_chief {

inline constexpr char kData[] = "/usr/share/datasets/fashion-mnist";
inline constexpr int64_t kMaxSteps = 1200;

inline bool FashionMnistInstalled() {
  return std::filesystem::exists(absl::StrCat(kData, "/train-images-idx3-ubyte.gz"));
}

// Fashion-MNIST, an MLP of 64 and 32, kMaxSteps of 64 examples, a checkpoint
// every 100 steps; `sync` picks the synchronous parameter server.
inline std::vector<std::string> TrainerArgs(bool sync) {
  return {absl::StrCat("--train_data_paths=", kData, "/train-images-idx3-ubyte.gz"),
          absl::StrCat("--eval_data_paths=", kData, "/t10k-images-idx3-ubyte.gz"),
          absl::StrCat("--max_steps=", kMaxSteps),
          "--save_checkpoints_steps=100",
          "--batch_size=64",
          "--hidden1=64",
          "--hidden2=32",
          "--threads=1",
          "--seed=5",
          "--eval_every_secs=0",
          absl::StrCat("--sync_replicas=", sync ? "true" : "false")};
}

// How a job ended: its state's name, and its chief's last "Final metrics"
// line found in `log` (the chief's output, every run of it).
struct Outcome {
  std::string state;
  int64_t final_step = -1;
  double accuracy = -1;
  std::string log;
};

inline Outcome OutcomeOf(std::string state, std::string log) {
  Outcome run{.state = std::move(state), .log = std::move(log)};
  if (auto final = test_support::LastFinalMetrics(run.log)) {
    run.final_step = final->step;
    run.accuracy = final->accuracy;
  }
  return run;
}

// An undisturbed run, the one the disturbed ones are held to.
inline void ExpectUndisturbed(const std::string& job, const Outcome& run) {
  EXPECT_EQ(run.state, "SUCCEEDED") << run.log;
  EXPECT_GE(run.final_step, kMaxSteps) << run.log;
  EXPECT_GT(run.accuracy, 0.7) << run.log;
  std::cout << job << ": accuracy " << run.accuracy << std::endl;
}

// What every disturbed run shares, and its figures for the record. Its
// outputs are in `output_dir`; `context` says more when it did not succeed.
inline void ExpectFinishedLikeTheUndisturbedRun(const std::string& job,
                                                const std::string& output_dir, const Outcome& run,
                                                const Outcome& undisturbed, int64_t resumed_from,
                                                bool sync, const std::string& context) {
  EXPECT_EQ(run.state, "SUCCEEDED") << context << "\n" << run.log;
  // Asynchronous updates in flight at the end may land past --max_steps,
  // one per worker at most, as in TensorFlow; synchronous ones never do.
  EXPECT_GE(run.final_step, kMaxSteps) << run.log;
  EXPECT_LE(run.final_step, kMaxSteps + (sync ? 0 : 2)) << run.log;
  EXPECT_NEAR(run.accuracy, undisturbed.accuracy, 0.05) << run.log;
  // The chief's next run restored the last checkpoint of the killed one:
  // nothing before it was trained again.
  EXPECT_THAT(run.log, ::testing::HasSubstr(absl::StrCat("Restored checkpoint at step ",
                                                         resumed_from, " from ", output_dir)));
  EXPECT_EQ(test_support::LatestCheckpointStep(output_dir), run.final_step);
  EXPECT_TRUE(std::filesystem::exists(output_dir + "/export/model.pb"));
  ::testing::Test::RecordProperty(job + "_resumed_from_step", static_cast<int>(resumed_from));
  ::testing::Test::RecordProperty(job + "_accuracy", absl::StrCat(run.accuracy));
  std::cout << job << ": " << run.state << " after " << run.final_step << " steps, accuracy "
            << run.accuracy << " (undisturbed " << undisturbed.accuracy
            << "), the chief resumed from step " << resumed_from << std::endl;
}

}  // namespace kubetrain::lost_chief
