#pragma once

// TensorBoard event files: TFRecord-framed kubetrain.v1.tensorboard.Event
// protos (wire-compatible with TensorFlow's Event), one file per writer named
// events.out.tfevents.<unix seconds>.<hostname>, starting with the
// file_version event "brain.Event:2" as TensorFlow's EventsWriter does.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kubetrain/v1/tensorboard.pb.h"
#include "trainer-runtime/data/tfrecord.h"

namespace kubetrain::runtime::summary {

inline constexpr char kEventFileVersion[] = "brain.Event:2";

// "events.out.tfevents.<seconds, 10 digits zero-padded>.<hostname>", as
// TensorFlow names them (TensorBoard finds files by the "tfevents" part).
std::string EventFileName(int64_t unix_seconds, std::string_view hostname);

// The machine's host name ("localhost" when it cannot be read).
std::string LocalHostName();

// Appends events to one event file. Thread-safe: calls are serialised by an
// internal mutex, so the training loop and an evaluation thread may share one
// writer. Events are buffered until Flush() or Close() (or the buffer fills).
// Errors name the file.
class EventWriter {
 public:
  // Creates `dir` if needed and a new event file in it named for
  // `start_wall_time` and `hostname`; when that name exists already (two
  // writers started in the same second), ".1", ".2", ... is appended rather
  // than overwriting. Writes and flushes the file_version event.
  static absl::StatusOr<std::unique_ptr<EventWriter>> Create(const std::string& dir,
                                                             double start_wall_time,
                                                             std::string_view hostname);
  // Same with the current time and LocalHostName().
  static absl::StatusOr<std::unique_ptr<EventWriter>> Create(const std::string& dir);

  ~EventWriter();  // closes, ignoring errors

  // One Event holding one scalar (Summary.Value.simple_value).
  absl::Status WriteScalar(std::string_view tag, int64_t step, float value, double wall_time);
  // One Event holding several scalars of the same step.
  absl::Status WriteScalars(const std::vector<std::pair<std::string, float>>& values, int64_t step,
                            double wall_time);
  absl::Status WriteEvent(const v1::tensorboard::Event& event);
  absl::Status Flush();
  absl::Status Close();

  const std::string& path() const { return path_; }

 private:
  EventWriter(std::string path, std::unique_ptr<data::TFRecordWriter> writer);

  const std::string path_;
  absl::Mutex mu_;
  std::unique_ptr<data::TFRecordWriter> writer_ ABSL_GUARDED_BY(mu_);
};

// Reads every event of an event file (for tests and tools). DATA_LOSS for a
// corrupt or truncated record, or a record that is not an Event; messages
// name the file and byte offset.
absl::StatusOr<std::vector<v1::tensorboard::Event>> ReadEventFile(const std::string& path);

}  // namespace kubetrain::runtime::summary
