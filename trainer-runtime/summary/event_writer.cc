#include "trainer-runtime/summary/event_writer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace kubetrain::runtime::summary {

std::string EventFileName(int64_t unix_seconds, std::string_view hostname) {
  return absl::StrFormat("events.out.tfevents.%010d.%s", unix_seconds,
                         absl::string_view(hostname.data(), hostname.size()));
}

std::string LocalHostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

EventWriter::EventWriter(std::string path, std::unique_ptr<data::TFRecordWriter> writer)
    : path_(std::move(path)), writer_(std::move(writer)) {}

EventWriter::~EventWriter() { Close().IgnoreError(); }

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Create(const std::string& dir,
                                                                 double start_wall_time,
                                                                 std::string_view hostname) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat(dir, ": cannot create the event directory: ", ec.message()));
  }
  const std::string base =
      (std::filesystem::path(dir) /
       EventFileName(static_cast<int64_t>(std::floor(start_wall_time)), hostname))
          .string();
  std::string path = base;
  for (int n = 1; std::filesystem::exists(path, ec); ++n) path = absl::StrCat(base, ".", n);

  ASSIGN_OR_RETURN(std::unique_ptr<data::TFRecordWriter> records, data::TFRecordWriter::Open(path));
  std::unique_ptr<EventWriter> writer(new EventWriter(path, std::move(records)));
  v1::tensorboard::Event version;
  version.set_wall_time(start_wall_time);
  version.set_file_version(kEventFileVersion);
  RETURN_IF_ERROR(writer->WriteEvent(version));
  RETURN_IF_ERROR(writer->Flush());
  return writer;
}

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Create(const std::string& dir) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return Create(dir, now, LocalHostName());
}

absl::Status EventWriter::WriteScalar(std::string_view tag, int64_t step, float value,
                                      double wall_time) {
  v1::tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(value);
  return WriteEvent(event);
}

absl::Status EventWriter::WriteScalars(const std::vector<std::pair<std::string, float>>& values,
                                       int64_t step, double wall_time) {
  v1::tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    auto* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  return WriteEvent(event);
}

absl::Status EventWriter::WriteEvent(const v1::tensorboard::Event& event) {
  std::string bytes;
  if (!event.SerializeToString(&bytes)) {
    return absl::InternalError(absl::StrCat(path_, ": cannot serialise an event"));
  }
  absl::MutexLock lock(&mu_);
  if (writer_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": event writer is closed"));
  }
  return writer_->Write(bytes);
}

absl::Status EventWriter::Flush() {
  absl::MutexLock lock(&mu_);
  if (writer_ == nullptr) return absl::OkStatus();
  return writer_->Flush();
}

absl::Status EventWriter::Close() {
  absl::MutexLock lock(&mu_);
  if (writer_ == nullptr) return absl::OkStatus();
  absl::Status status = writer_->Close();
  writer_.reset();
  return status;
}

absl::StatusOr<std::vector<v1::tensorboard::Event>> ReadEventFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<data::TFRecordReader> reader, data::TFRecordReader::Open(path));
  std::vector<v1::tensorboard::Event> events;
  std::string record;
  while (true) {
    const uint64_t offset = reader->offset();
    ASSIGN_OR_RETURN(bool more, reader->ReadRecord(&record));
    if (!more) break;
    if (!events.emplace_back().ParseFromString(record)) {
      return absl::DataLossError(
          absl::StrCat(path, ": record at byte offset ", offset, " is not an Event proto"));
    }
  }
  return events;
}

}  // namespace kubetrain::runtime::summary
