#include "trainer-runtime/data/example_format.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/text_format.h>

#include <memory>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/data/dataset.h"
#include "trainer-runtime/data/test_util.h"
#include "trainer-runtime/data/tfrecord.h"

namespace kubetrain::runtime::data {
namespace {

using ::kubetrain::runtime::data::testing::ReadAll;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// TensorFlow's tf.train.Example schema (tensorflow/core/example/example.proto
// and feature.proto), built at run time so that protobuf itself, not our
// hand-written codec, checks the wire format in both directions.
constexpr char kExampleSchema[] = R"pb(
  name: "tf_example.proto"
  package: "tensorflow"
  syntax: "proto3"
  message_type {
    name: "BytesList"
    field { name: "value" number: 1 label: LABEL_REPEATED type: TYPE_BYTES }
  }
  message_type {
    name: "FloatList"
    field {
      name: "value"
      number: 1
      label: LABEL_REPEATED
      type: TYPE_FLOAT
      options { packed: true }
    }
  }
  message_type {
    name: "Int64List"
    field {
      name: "value"
      number: 1
      label: LABEL_REPEATED
      type: TYPE_INT64
      options { packed: true }
    }
  }
  message_type {
    name: "Feature"
    field {
      name: "bytes_list"
      number: 1
      label: LABEL_OPTIONAL
      type: TYPE_MESSAGE
      type_name: ".tensorflow.BytesList"
      oneof_index: 0
    }
    field {
      name: "float_list"
      number: 2
      label: LABEL_OPTIONAL
      type: TYPE_MESSAGE
      type_name: ".tensorflow.FloatList"
      oneof_index: 0
    }
    field {
      name: "int64_list"
      number: 3
      label: LABEL_OPTIONAL
      type: TYPE_MESSAGE
      type_name: ".tensorflow.Int64List"
      oneof_index: 0
    }
    oneof_decl { name: "kind" }
  }
  message_type {
    name: "Features"
    field {
      name: "feature"
      number: 1
      label: LABEL_REPEATED
      type: TYPE_MESSAGE
      type_name: ".tensorflow.Features.FeatureEntry"
    }
    nested_type {
      name: "FeatureEntry"
      field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
      field {
        name: "value"
        number: 2
        label: LABEL_OPTIONAL
        type: TYPE_MESSAGE
        type_name: ".tensorflow.Feature"
      }
      options { map_entry: true }
    }
  }
  message_type {
    name: "Example"
    field {
      name: "features"
      number: 1
      label: LABEL_OPTIONAL
      type: TYPE_MESSAGE
      type_name: ".tensorflow.Features"
    }
  }
)pb";

class TfExample {
 public:
  TfExample() {
    google::protobuf::FileDescriptorProto file;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kExampleSchema, &file));
    EXPECT_NE(pool_.BuildFile(file), nullptr);
    prototype_ = factory_.GetPrototype(pool_.FindMessageTypeByName("tensorflow.Example"));
  }
  std::unique_ptr<google::protobuf::Message> FromText(const std::string& text) {
    std::unique_ptr<google::protobuf::Message> m(prototype_->New());
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, m.get())) << text;
    return m;
  }
  std::unique_ptr<google::protobuf::Message> FromBytes(const std::string& bytes) {
    std::unique_ptr<google::protobuf::Message> m(prototype_->New());
    EXPECT_TRUE(m->ParseFromString(bytes));
    return m;
  }

 private:
  google::protobuf::DescriptorPool pool_;
  google::protobuf::DynamicMessageFactory factory_;
  const google::protobuf::Message* prototype_ = nullptr;
};

TEST(ExampleFormatTest, OurEncodingParsesAsTfExample) {
  TfExample tf;
  const float values[] = {0.5f, -1.0f, 3.25f, 0.0f, 7.0f, 1e-3f};
  const std::string bytes = EncodeExample(values, 6, 4, {2, 3, 1});
  const auto parsed = tf.FromBytes(bytes);
  const auto expected = tf.FromText(R"pb(
    features {
      feature {
        key: "features"
        value { float_list { value: [ 0.5, -1, 3.25, 0, 7, 0.001 ] } }
      }
      feature {
        key: "label"
        value { int64_list { value: 4 } }
      }
      feature {
        key: "shape"
        value { int64_list { value: [ 2, 3, 1 ] } }
      }
    })pb");
  // Map order is not canonical in text form; compare by re-serialising deterministically.
  std::string a, b;
  {
    google::protobuf::io::StringOutputStream sa(&a), sb(&b);
    google::protobuf::io::CodedOutputStream ca(&sa), cb(&sb);
    ca.SetSerializationDeterministic(true);
    cb.SetSerializationDeterministic(true);
    parsed->SerializeToCodedStream(&ca);
    expected->SerializeToCodedStream(&cb);
  }
  EXPECT_EQ(a, b);
}

TEST(ExampleFormatTest, DecodesTfExamplesPackedOrNotWithExtraFeatures) {
  TfExample tf;
  const auto message = tf.FromText(R"pb(
    features {
      feature {
        key: "id"
        value { bytes_list { value: "abc" } }
      }
      feature {
        key: "features"
        value { float_list { value: [ 1, 2, 3, 4 ] } }
      }
      feature {
        key: "label"
        value { int64_list { value: 9 } }
      }
      feature {
        key: "weight"
        value { float_list { value: 0.5 } }
      }
    })pb");
  auto decoded = DecodeExample(message->SerializeAsString());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_THAT(decoded->features, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(decoded->label, ElementsAre(9));
  EXPECT_TRUE(decoded->shape.empty());

  // Unpacked repeated floats and ints (what proto2-era writers produced):
  // FloatList{value: 1.5 (fixed32)}, Int64List{value: 2 (varint)}.
  const std::string unpacked_features("\x0d\x00\x00\xc0\x3f", 5);
  const std::string unpacked_label("\x08\x02", 2);
  auto entry = [](const std::string& key, int kind, const std::string& list) {
    std::string feature =
        std::string(1, static_cast<char>(kind << 3 | 2)) + static_cast<char>(list.size()) + list;
    std::string e = "\x0a" + std::string(1, static_cast<char>(key.size())) + key + "\x12" +
                    static_cast<char>(feature.size()) + feature;
    return "\x0a" + std::string(1, static_cast<char>(e.size())) + e;
  };
  const std::string map =
      entry("features", 2, unpacked_features) + entry("label", 3, unpacked_label);
  const std::string example = "\x0a" + std::string(1, static_cast<char>(map.size())) + map;
  auto from_unpacked = DecodeExample(example);
  ASSERT_TRUE(from_unpacked.ok()) << from_unpacked.status();
  EXPECT_THAT(from_unpacked->features, ElementsAre(1.5f));
  EXPECT_THAT(from_unpacked->label, ElementsAre(2));
  // And protobuf agrees about what those bytes mean.
  EXPECT_THAT(tf.FromBytes(example)->ShortDebugString(), HasSubstr("value: 1.5"));
}

TEST(ExampleFormatTest, RejectsWrongKindsAndMissingFeatures) {
  TfExample tf;
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {R"pb(features {
              feature {
                key: "label"
                value { int64_list { value: 1 } }
              }
            })pb",
       "feature 'features' (float_list) is missing or empty"},
      {R"pb(features {
              feature {
                key: "features"
                value { float_list { value: 1 } }
              }
            })pb",
       "feature 'label' must hold exactly one int64, has 0"},
      {R"pb(features {
              feature {
                key: "features"
                value { float_list { value: 1 } }
              }
              feature {
                key: "label"
                value { float_list { value: 1 } }
              }
            })pb",
       "feature 'label' must be a int64_list"},
      {R"pb(features {
              feature {
                key: "features"
                value { bytes_list { value: "x" } }
              }
              feature {
                key: "label"
                value { int64_list { value: 1 } }
              }
            })pb",
       "feature 'features' must be a float_list"},
  };
  for (const auto& c : cases) {
    auto decoded = DecodeExample(tf.FromText(c.text)->SerializeAsString());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(decoded.status().message(), HasSubstr(c.message));
  }
  EXPECT_THAT(DecodeExample("\x0a\x05\x0a").status().message(),
              HasSubstr("not a valid tf.train.Example"));
}

Dataset SmallDataset() {
  Dataset d;
  d.example_shape = {2, 2, 1};
  d.num_examples = 3;
  d.features = {0, 0.25f, 0.5f, 1, 1, 1, 0, 0, 0.125f, 0.375f, 0.625f, 0.875f};
  d.labels = {1, 0, 4};
  d.num_classes = 5;
  return d;
}

TEST(ExampleFormatTest, DatasetRoundTripsThroughAFileAndLoadDataset) {
  test_support::TempDir tmp;
  const std::string path = tmp.path() + "/small.tfrecord";
  const Dataset original = SmallDataset();
  ASSERT_TRUE(WriteExampleTFRecord(original, path).ok());
  auto loaded = LoadDataset(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->example_shape, original.example_shape);
  EXPECT_EQ(loaded->num_examples, 3);
  EXPECT_EQ(loaded->features, original.features);
  EXPECT_EQ(loaded->labels, original.labels);
  EXPECT_EQ(loaded->num_classes, 5);
}

TEST(ExampleFormatTest, ErrorsNameRecordAndOffset) {
  test_support::TempDir tmp;
  const std::string dir = tmp.path();
  std::string bytes;
  const float ok_values[] = {1, 2, 3, 4};
  AppendTFRecord(EncodeExample(ok_values, 4, 1, {2, 2}), &bytes);
  const size_t second = bytes.size();
  AppendTFRecord(EncodeExample(ok_values, 4, 1, {4}), &bytes);
  auto d = ParseExampleTFRecord(bytes, "f.tfrecord");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.status().message(), "f.tfrecord: record 1 at byte offset " + std::to_string(second) +
                                      ": shape differs from the first record's");

  std::string bad_shape;
  AppendTFRecord(EncodeExample(ok_values, 4, 1, {3, 2}), &bad_shape);
  EXPECT_EQ(ParseExampleTFRecord(bad_shape, "g").status().message(),
            "g: record 0 at byte offset 0: shape does not match its 4 values");

  std::string negative;
  AppendTFRecord(EncodeExample(ok_values, 4, -3, {}), &negative);
  EXPECT_EQ(ParseExampleTFRecord(negative, "h").status().message(),
            "h: record 0 at byte offset 0: label -3 is outside [0, 1048576]");

  std::string corrupt = bytes;
  corrupt[second + 14] ^= 1;
  EXPECT_THAT(ParseExampleTFRecord(corrupt, "c").status().message(),
              HasSubstr("c: corrupt record at byte offset " + std::to_string(second)));
  EXPECT_EQ(ParseExampleTFRecord("", "e").status().message(), "e: no records");
}

}  // namespace
}  // namespace kubetrain::runtime::data
