// Runs the kubetrain-runtime binary as a replica would: exit codes, and a
// restart that resumes from the latest checkpoint and ends with the same
// weights as an uninterrupted run.
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "trainer-runtime/cmd/device_factory.h"
#include "trainer-runtime/cmd/runtime_cli_test_util.h"
#include "trainer-runtime/engine/checkpoint.h"
#include "trainer-runtime/exit_codes.h"

namespace kubetrain::runtime {
namespace {

namespace fs = std::filesystem;
using cli_test::RunBinary;
using cli_test::Slurp;

class RuntimeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = cli_test::FreshTempDir("runtime-cli");
    cli_test::WriteTinyDataset(dir_ / "train.csv");
  }
  std::string Flags(const std::string& out, int max_steps) const {
    return cli_test::TinyTrainArgs(dir_ / "train.csv", dir_ / out, max_steps);
  }
  fs::path dir_;
};

TEST_F(RuntimeCliTest, ExitCodes) {
  std::string log = (dir_ / "log").string();
  EXPECT_EQ(RunBinary("", log), kExitUsage);
  EXPECT_EQ(RunBinary("frobnicate", log), kExitUsage);
  EXPECT_EQ(RunBinary("train --no_such_flag=1", log), kExitUsage);
  EXPECT_NE(Slurp(log).find("--no_such_flag"), std::string::npos) << Slurp(log);
  EXPECT_EQ(RunBinary("train --train_data_paths=" + (dir_ / "missing.csv").string(), log),
            kExitBadInput);
  EXPECT_NE(Slurp(log).find("missing.csv"), std::string::npos) << Slurp(log);
  EXPECT_EQ(RunBinary(Flags("nan", 40) + " --optimizer=sgd --learning_rate=1e30", log),
            kExitNonFiniteLoss)
      << Slurp(log);
  EXPECT_EQ(RunBinary(Flags("ok", 5), log), kExitOk) << Slurp(log);
  EXPECT_NE(Slurp(log).find("Final metrics after 5 steps, loss: "), std::string::npos)
      << Slurp(log);
}

TEST_F(RuntimeCliTest, HelpIsGeneratedFromTheFlagsAndTheirDefaults) {
  std::string log = (dir_ / "log").string();
  ASSERT_EQ(RunBinary("train --help", log), kExitOk) << Slurp(log);
  const std::string train = Slurp(log);
  EXPECT_NE(train.find("usage: kubetrain-runtime train [flags]"), std::string::npos) << train;
  EXPECT_NE(train.find("--batch_size N"), std::string::npos) << train;
  EXPECT_NE(train.find("examples per step (default 128)"), std::string::npos) << train;
  EXPECT_NE(train.find("--allreduce_bucket_kib N"), std::string::npos) << train;
  EXPECT_NE(train.find("(default 4096)"), std::string::npos) << train;
  EXPECT_NE(train.find("--metrics_address HOST:PORT"), std::string::npos) << train;
  EXPECT_NE(train.find("CLOUD_ML_HP_METRIC_FILE"), std::string::npos) << train;
  ASSERT_EQ(RunBinary("exec --help", log), kExitOk) << Slurp(log);
  const std::string exec = Slurp(log);
  EXPECT_NE(exec.find("--poll-interval DURATION"), std::string::npos) << exec;
  EXPECT_NE(exec.find("(default 1s)"), std::string::npos) << exec;
  EXPECT_NE(exec.find("(default python3)"), std::string::npos) << exec;
}

TEST_F(RuntimeCliTest, ExecPassesTheCommandsOwnFlagsThrough) {
  std::string log = (dir_ / "log").string();
  // After `--`, and from the first argument that is not a flag, everything is the command's.
  EXPECT_EQ(RunBinary("exec --poll-interval=50ms -- sh -c 'echo \"$0 $1\"' --python --x", log),
            kExitOk)
      << Slurp(log);
  EXPECT_NE(Slurp(log).find("--python --x"), std::string::npos) << Slurp(log);
  EXPECT_EQ(RunBinary("exec sh -c 'exit 7' --package", log), 7) << Slurp(log);
  EXPECT_EQ(RunBinary("exec --bogus sh", log), kExitUsage);
  EXPECT_NE(Slurp(log).find("unknown flag --bogus"), std::string::npos) << Slurp(log);
  EXPECT_EQ(RunBinary("exec --poll-interval", log), kExitUsage);
  EXPECT_NE(Slurp(log).find("--poll-interval needs a value, a duration"), std::string::npos)
      << Slurp(log);
  EXPECT_EQ(RunBinary("exec --poll-interval=50ms", log), kExitUsage);
  EXPECT_NE(Slurp(log).find("no command"), std::string::npos) << Slurp(log);
}

TEST_F(RuntimeCliTest, TrainingWithoutAnOutputFolderSaysNothingIsKept) {
  std::string log = (dir_ / "log").string();
  const std::string no_output =
      "train --train_data_paths=" + (dir_ / "train.csv").string() +
      " --max_steps=3 --batch_size=20 --hidden1=8 --hidden2=4 --threads=1";
  ASSERT_EQ(RunBinary(no_output, log), kExitOk) << Slurp(log);
  EXPECT_NE(Slurp(log).find("Warning: no --job-dir or --output_path"), std::string::npos)
      << Slurp(log);
  ASSERT_EQ(RunBinary(Flags("kept", 3), log), kExitOk) << Slurp(log);
  EXPECT_EQ(Slurp(log).find("Warning: no --job-dir"), std::string::npos) << Slurp(log);
}

TEST_F(RuntimeCliTest, DeviceFlag) {
  std::string log = (dir_ / "log").string();
  EXPECT_EQ(RunBinary(Flags("cpu", 3) + " --device=cpu", log), kExitOk) << Slurp(log);
  EXPECT_NE(Slurp(log).find("Device: /device:CPU:0 (--device=cpu)"), std::string::npos)
      << Slurp(log);
  EXPECT_EQ(RunBinary(Flags("tpu", 3) + " --device=tpu", log), kExitUsage) << Slurp(log);
  EXPECT_NE(Slurp(log).find("--device"), std::string::npos) << Slurp(log);
  if (cmd::BuiltWithCuda() && cmd::VisibleGpuCount() > 0) {
    GTEST_SKIP() << "a GPU is visible: --device=gpu is valid here";
  }
  EXPECT_EQ(RunBinary(Flags("gpu", 3) + " --device=gpu", log), kExitUsage) << Slurp(log);
  EXPECT_NE(Slurp(log).find("--device=gpu"), std::string::npos) << Slurp(log);
  EXPECT_EQ(Slurp(log).find("Final metrics"), std::string::npos) << Slurp(log);
}

TEST_F(RuntimeCliTest, AnObjectStoreJobDirExitsTwoAndCreatesNoLocalFolder) {
  const fs::path work = dir_ / "cwd";
  fs::create_directories(work);
  std::string log = (dir_ / "log").string();
  const std::string data = (dir_ / "train.csv").string();
  struct Case {
    std::string flags;
    std::string named;  // what the error must name
  };
  const Case cases[] = {
      {"--job-dir gs://my-bucket/run1", "flag '--job-dir': \"gs://my-bucket/run1\""},
      {"--output_path=s3://bucket/out", "flag '--output_path': \"s3://bucket/out\""},
      {"--output_path=out --eval_data_paths=gs://my-bucket/eval.csv",
       "flag '--eval_data_paths': \"gs://my-bucket/eval.csv\""},
  };
  for (const Case& c : cases) {
    // Run from `work`, where a URI taken as a relative path would land.
    const std::string command =
        "train --train_data_paths=" + data + " " + c.flags +
        " --max_steps=3 --batch_size=20 --hidden1=8 --hidden2=4 --threads=1";
    EXPECT_EQ(RunBinary(command, log, "cd " + work.string() + " &&"), kExitUsage) << Slurp(log);
    EXPECT_NE(Slurp(log).find(c.named), std::string::npos) << Slurp(log);
    EXPECT_EQ(Slurp(log).find("Final metrics"), std::string::npos) << Slurp(log);
  }
  // Nothing at all was written where the process ran: no "gs:" or "s3:".
  EXPECT_TRUE(fs::is_empty(work)) << fs::directory_iterator(work)->path();
  EXPECT_FALSE(fs::exists(dir_ / "gs:"));
}

TEST_F(RuntimeCliTest, RestartResumesFromLatestCheckpoint) {
  std::string log = (dir_ / "log").string();
  ASSERT_EQ(RunBinary(Flags("straight", 60), log), kExitOk) << Slurp(log);
  // The first process stops at step 25 (as if killed right after its
  // checkpoint), the restarted one resumes there.
  ASSERT_EQ(RunBinary(Flags("restarted", 25), log), kExitOk) << Slurp(log);
  ASSERT_EQ(RunBinary(Flags("restarted", 60), log), kExitOk) << Slurp(log);
  EXPECT_NE(Slurp(log).find("Restored checkpoint at step 25"), std::string::npos) << Slurp(log);
  auto a = engine::ReadCheckpoint((dir_ / "straight" / "model.ckpt-60").string());
  auto b = engine::ReadCheckpoint((dir_ / "restarted" / "model.ckpt-60").string());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->variables_size(), b->variables_size());
  for (int i = 0; i < a->variables_size(); ++i) {
    EXPECT_EQ(a->variables(i).value().data(), b->variables(i).value().data())
        << a->variables(i).name();
  }
}

}  // namespace
}  // namespace kubetrain::runtime
