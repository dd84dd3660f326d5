#include "trainer-runtime/summary/event_writer.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/data/tfrecord.h"

namespace kubetrain::runtime::summary {
namespace {

using ::testing::HasSubstr;
using v1::tensorboard::Event;
using v1::tensorboard::Summary;

TEST(EventFileNameTest, IsTensorFlowsPattern) {
  EXPECT_EQ(EventFileName(1525851440, "worker-0"), "events.out.tfevents.1525851440.worker-0");
  EXPECT_EQ(EventFileName(42, "h"), "events.out.tfevents.0000000042.h");
}

TEST(EventWriterTest, ScalarEventHasTensorFlowsWireFormat) {
  // Hand-encoded with TensorFlow's field numbers: Event{wall_time=1 (fixed64),
  // step=2 (varint), summary=5 {value=1 {tag=1 "a", simple_value=2 (fixed32) 0.5}}}.
  const std::string expected(
      "\x09\x00\x00\x00\x00\x00\x00\xf8\x3f"  // wall_time 1.5
      "\x10\x03"                              // step 3
      "\x2a\x0a"                              // summary, 10 bytes
      "\x0a\x08"                              //   value, 8 bytes
      "\x0a\x01\x61"                          //     tag "a"
      "\x15\x00\x00\x00\x3f",                 //     simple_value 0.5f
      23);
  Event event;
  event.set_wall_time(1.5);
  event.set_step(3);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag("a");
  v->set_simple_value(0.5f);
  EXPECT_EQ(event.SerializeAsString(), expected);
}

TEST(EventWriterTest, WritesVersionThenScalarsReadableThroughTFRecord) {
  test_support::TempDir tmp;
  const std::string dir = tmp.path() + "/logs/train";  // created by the writer
  auto writer = EventWriter::Create(dir, 1700000000.25, "host-a");
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ((*writer)->path(), dir + "/events.out.tfevents.1700000000.host-a");
  ASSERT_TRUE((*writer)->WriteScalar("loss", 10, 2.5f, 1700000001.0).ok());
  ASSERT_TRUE((*writer)->WriteScalar("accuracy", 10, 0.0f, 1700000001.5).ok());
  ASSERT_TRUE((*writer)
                  ->WriteScalars({{"eval/loss", 1.25f}, {"eval/accuracy", 0.75f}}, 20, 1700000002.0)
                  .ok());
  ASSERT_TRUE((*writer)->Close().ok());

  // Read back through the TFRecord reader, parsing each record ourselves.
  auto reader = data::TFRecordReader::Open((*writer)->path());
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<Event> events;
  std::string record;
  while (true) {
    auto more = (*reader)->ReadRecord(&record);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ASSERT_TRUE(events.emplace_back().ParseFromString(record));
  }
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[0].wall_time(), 1700000000.25);

  EXPECT_EQ(events[1].step(), 10);
  EXPECT_EQ(events[1].wall_time(), 1700000001.0);
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 2.5f);

  // Zero is written as a present value, not dropped as a proto3 default.
  ASSERT_EQ(events[2].summary().value_size(), 1);
  EXPECT_EQ(events[2].summary().value(0).value_case(), Summary::Value::kSimpleValue);
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 0.0f);

  EXPECT_EQ(events[3].step(), 20);
  ASSERT_EQ(events[3].summary().value_size(), 2);
  EXPECT_EQ(events[3].summary().value(1).tag(), "eval/accuracy");
  EXPECT_EQ(events[3].summary().value(1).simple_value(), 0.75f);

  auto again = ReadEventFile((*writer)->path());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->size(), 4u);
}

TEST(EventWriterTest, FlushMakesEventsVisibleBeforeClose) {
  test_support::TempDir tmp;
  auto writer = EventWriter::Create(tmp.path(), 1700000000, "h");
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->WriteScalar("loss", 1, 1.0f, 1700000001).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  auto events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 2u);
}

TEST(EventWriterTest, SecondWriterInTheSameSecondDoesNotOverwrite) {
  test_support::TempDir tmp;
  const std::string dir = tmp.path();
  auto first = EventWriter::Create(dir, 1700000000, "h");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->WriteScalar("loss", 1, 1.0f, 1700000000).ok());
  ASSERT_TRUE((*first)->Close().ok());
  auto second = EventWriter::Create(dir, 1700000000.9, "h");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->path(), (*first)->path() + ".1");
  auto events = ReadEventFile((*first)->path());
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 2u);
}

TEST(EventWriterTest, ConcurrentWritersLoseNothing) {
  test_support::TempDir tmp;
  auto writer = EventWriter::Create(tmp.path(), 1700000000, "h");
  ASSERT_TRUE(writer.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) {
        EXPECT_TRUE((*writer)->WriteScalar(absl::StrCat("t", t), i, i, 1700000000 + i).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE((*writer)->Close().ok());
  auto events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->size(), 1001u);
}

TEST(EventWriterTest, WriteAfterCloseFails) {
  test_support::TempDir tmp;
  auto writer = EventWriter::Create(tmp.path(), 1700000000, "h");
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Close().ok());
  const absl::Status s = (*writer)->WriteScalar("loss", 1, 1.0f, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr((*writer)->path()));
}

TEST(ReadEventFileTest, NonEventRecordNamesOffset) {
  test_support::TempDir tmp;
  const std::string path = tmp.path() + "/events.out.tfevents.1.h";
  auto records = data::TFRecordWriter::Open(path);
  ASSERT_TRUE(records.ok());
  Event ok;
  ok.set_file_version("brain.Event:2");
  ASSERT_TRUE((*records)->Write(ok.SerializeAsString()).ok());
  ASSERT_TRUE((*records)->Write("\xff\xff\xff").ok());  // not a valid proto
  ASSERT_TRUE((*records)->Close().ok());
  auto events = ReadEventFile(path);
  EXPECT_EQ(events.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(events.status().message(),
              HasSubstr(path + ": record at byte offset " +
                        std::to_string(12 + ok.ByteSizeLong() + 4) + " is not an Event proto"));
}

}  // namespace
}  // namespace kubetrain::runtime::summary
