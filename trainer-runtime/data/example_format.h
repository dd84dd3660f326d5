#pragma once

// kubetrain's TFRecord dataset format: a TFRecord file (see tfrecord.h) whose
// records are serialised tf.train.Example protos, one example per record,
// with these features (so TensorFlow reads the files with
// tf.data.TFRecordDataset + tf.io.parse_single_example, and files written
// that way by TensorFlow load here):
//
//   "features"  float_list  the example's values, row-major (required)
//   "label"     int64_list  exactly one class index >= 0 (required)
//   "shape"     int64_list  the example's shape, e.g. [28, 28, 1] (optional;
//                           default [len(features)]; its product must equal
//                           len(features))
//
// Every record must have the same shape. Other features are ignored. Both
// packed and unpacked encodings of the lists are read; ours are packed.
//
// tf.train.Example, for reference (tensorflow/core/example/*.proto):
//   Example { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }
//   Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                          Int64List int64_list = 3; } }
//   FloatList { repeated float value = 1 [packed = true]; }
//   Int64List { repeated int64 value = 1 [packed = true]; }

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer-runtime/data/dataset.h"

namespace kubetrain::runtime::data {

inline constexpr char kExampleFeaturesKey[] = "features";
inline constexpr char kExampleLabelKey[] = "label";
inline constexpr char kExampleShapeKey[] = "shape";

// One example's features as a serialised tf.train.Example. `shape` empty
// means no "shape" feature.
std::string EncodeExample(const float* features, size_t count, int64_t label,
                          const std::vector<int64_t>& shape);

// The three features of a serialised tf.train.Example. INVALID_ARGUMENT when
// the bytes are not a valid Example or a required feature is missing or of
// the wrong kind.
struct DecodedExample {
  std::vector<float> features;
  std::vector<int64_t> label;
  std::vector<int64_t> shape;  // empty when absent
};
absl::StatusOr<DecodedExample> DecodeExample(std::string_view bytes);

// Writes `dataset` in this format (with the "shape" feature).
absl::Status WriteExampleTFRecord(const Dataset& dataset, const std::string& path);

// Reads a dataset in this format from memory / from a file. Errors name the
// file, the record number and its byte offset.
absl::StatusOr<Dataset> ParseExampleTFRecord(std::string_view bytes, std::string_view name);
absl::StatusOr<Dataset> LoadExampleTFRecord(const std::string& path);

}  // namespace kubetrain::runtime::data
