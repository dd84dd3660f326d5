#include "trainer-runtime/data/example_format.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer-runtime/data/file_io.h"
#include "trainer-runtime/data/tfrecord.h"

namespace kubetrain::runtime::data {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

// Field numbers of tf.train.Example and friends.
constexpr int kExampleFeatures = 1;  // Example.features
constexpr int kFeaturesMap = 1;      // Features.feature (map entries)
constexpr int kMapKey = 1;
constexpr int kMapValue = 2;
constexpr int kFloatList = 2;  // Feature.float_list
constexpr int kInt64List = 3;  // Feature.int64_list
constexpr int kListValue = 1;  // FloatList.value, Int64List.value

uint32_t Tag(int field, WireFormatLite::WireType type) {
  return WireFormatLite::MakeTag(field, type);
}

// --- Encoding: nested length-delimited messages built inside out. ----------------

std::string PackedFloats(const float* values, size_t count) {
  std::string list;
  {
    StringOutputStream stream(&list);
    CodedOutputStream out(&stream);
    out.WriteTag(Tag(kListValue, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint32(static_cast<uint32_t>(count * sizeof(float)));
    for (size_t i = 0; i < count; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof(bits));
      out.WriteLittleEndian32(bits);
    }
  }
  return list;
}

std::string PackedInt64s(const std::vector<int64_t>& values) {
  std::string payload;
  {
    StringOutputStream stream(&payload);
    CodedOutputStream out(&stream);
    for (int64_t v : values) out.WriteVarint64(static_cast<uint64_t>(v));
  }
  std::string list;
  {
    StringOutputStream stream(&list);
    CodedOutputStream out(&stream);
    out.WriteTag(Tag(kListValue, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint32(static_cast<uint32_t>(payload.size()));
    out.WriteString(payload);
  }
  return list;
}

// Appends field `field` holding the bytes `message`.
void AppendMessage(int field, const std::string& message, std::string* out) {
  StringOutputStream stream(out);
  CodedOutputStream coded(&stream);
  coded.WriteTag(Tag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  coded.WriteVarint32(static_cast<uint32_t>(message.size()));
  coded.WriteString(message);
}

void AppendMapEntry(std::string_view key, int kind, const std::string& list,
                    std::string* features) {
  std::string feature;
  AppendMessage(kind, list, &feature);
  std::string entry;
  AppendMessage(kMapKey, std::string(key), &entry);
  AppendMessage(kMapValue, feature, &entry);
  AppendMessage(kFeaturesMap, entry, features);
}

// --- Decoding ---------------------------------------------------------------------

enum class ListKind { kNone, kFloat, kInt64, kOther };

struct Feature {
  ListKind kind = ListKind::kNone;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

// Reads a length prefix and limits `in` to it; false when it runs past the end.
bool EnterMessage(CodedInputStream* in, CodedInputStream::Limit* limit) {
  uint32_t length;
  if (!in->ReadVarint32(&length)) return false;
  if (in->BytesUntilLimit() >= 0 && static_cast<int>(length) > in->BytesUntilLimit()) return false;
  *limit = in->PushLimit(static_cast<int>(length));
  return true;
}

bool ParseFloatList(CodedInputStream* in, std::vector<float>* out) {
  while (uint32_t tag = in->ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) != kListValue) {
      if (!WireFormatLite::SkipField(in, tag)) return false;
      continue;
    }
    const auto type = WireFormatLite::GetTagWireType(tag);
    if (type == WireFormatLite::WIRETYPE_FIXED32) {
      uint32_t bits;
      if (!in->ReadLittleEndian32(&bits)) return false;
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      out->push_back(f);
    } else if (type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      CodedInputStream::Limit limit;
      if (!EnterMessage(in, &limit)) return false;
      if (in->BytesUntilLimit() % 4 != 0) return false;
      out->reserve(out->size() + in->BytesUntilLimit() / 4);
      while (in->BytesUntilLimit() > 0) {
        uint32_t bits;
        if (!in->ReadLittleEndian32(&bits)) return false;
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        out->push_back(f);
      }
      in->PopLimit(limit);
    } else {
      return false;
    }
  }
  return in->BytesUntilLimit() == 0;
}

bool ParseInt64List(CodedInputStream* in, std::vector<int64_t>* out) {
  while (uint32_t tag = in->ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) != kListValue) {
      if (!WireFormatLite::SkipField(in, tag)) return false;
      continue;
    }
    const auto type = WireFormatLite::GetTagWireType(tag);
    uint64_t v;
    if (type == WireFormatLite::WIRETYPE_VARINT) {
      if (!in->ReadVarint64(&v)) return false;
      out->push_back(static_cast<int64_t>(v));
    } else if (type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      CodedInputStream::Limit limit;
      if (!EnterMessage(in, &limit)) return false;
      while (in->BytesUntilLimit() > 0) {
        if (!in->ReadVarint64(&v)) return false;
        out->push_back(static_cast<int64_t>(v));
      }
      in->PopLimit(limit);
    } else {
      return false;
    }
  }
  return in->BytesUntilLimit() == 0;
}

bool ParseFeature(CodedInputStream* in, Feature* feature) {
  while (uint32_t tag = in->ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if ((field == kFloatList || field == kInt64List) && delimited) {
      // A oneof: the last kind seen wins, as in protobuf.
      feature->floats.clear();
      feature->ints.clear();
      CodedInputStream::Limit limit;
      if (!EnterMessage(in, &limit)) return false;
      const bool ok = field == kFloatList ? ParseFloatList(in, &feature->floats)
                                          : ParseInt64List(in, &feature->ints);
      if (!ok) return false;
      in->PopLimit(limit);
      feature->kind = field == kFloatList ? ListKind::kFloat : ListKind::kInt64;
    } else {
      if (field == 1 && delimited) feature->kind = ListKind::kOther;  // bytes_list
      if (!WireFormatLite::SkipField(in, tag)) return false;
    }
  }
  return in->BytesUntilLimit() == 0;
}

// One map entry of Features.feature; only the three keys we use are kept.
bool ParseMapEntry(CodedInputStream* in, DecodedExample* example, std::string* error) {
  std::string key;
  Feature feature;
  bool have_value = false;
  while (uint32_t tag = in->ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (field == kMapKey && delimited) {
      if (!WireFormatLite::ReadString(in, &key)) return false;
    } else if (field == kMapValue && delimited) {
      CodedInputStream::Limit limit;
      if (!EnterMessage(in, &limit)) return false;
      feature = Feature();
      if (!ParseFeature(in, &feature)) return false;
      in->PopLimit(limit);
      have_value = true;
    } else if (!WireFormatLite::SkipField(in, tag)) {
      return false;
    }
  }
  if (in->BytesUntilLimit() != 0) return false;
  if (!have_value) return true;
  const auto expect = [&](ListKind kind, const char* kind_name) {
    if (feature.kind == kind) return true;
    *error = absl::StrCat("feature '", key, "' must be a ", kind_name);
    return false;
  };
  if (key == kExampleFeaturesKey) {
    if (!expect(ListKind::kFloat, "float_list")) return false;
    example->features = std::move(feature.floats);
  } else if (key == kExampleLabelKey) {
    if (!expect(ListKind::kInt64, "int64_list")) return false;
    example->label = std::move(feature.ints);
  } else if (key == kExampleShapeKey) {
    if (!expect(ListKind::kInt64, "int64_list")) return false;
    example->shape = std::move(feature.ints);
  }
  return true;
}

}  // namespace

std::string EncodeExample(const float* features, size_t count, int64_t label,
                          const std::vector<int64_t>& shape) {
  std::string map;
  AppendMapEntry(kExampleFeaturesKey, kFloatList, PackedFloats(features, count), &map);
  AppendMapEntry(kExampleLabelKey, kInt64List, PackedInt64s({label}), &map);
  if (!shape.empty()) AppendMapEntry(kExampleShapeKey, kInt64List, PackedInt64s(shape), &map);
  std::string example;
  AppendMessage(kExampleFeatures, map, &example);
  return example;
}

absl::StatusOr<DecodedExample> DecodeExample(std::string_view bytes) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.SetRecursionLimit(16);
  DecodedExample example;
  std::string error;
  bool valid = bytes.size() <= static_cast<size_t>(INT32_MAX);
  while (valid) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    if (field == kExampleFeatures &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      CodedInputStream::Limit features_limit;
      if (!(valid = EnterMessage(&in, &features_limit))) break;
      while (valid) {
        const uint32_t entry_tag = in.ReadTag();
        if (entry_tag == 0) break;
        if (WireFormatLite::GetTagFieldNumber(entry_tag) == kFeaturesMap &&
            WireFormatLite::GetTagWireType(entry_tag) ==
                WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
          CodedInputStream::Limit entry_limit;
          valid = EnterMessage(&in, &entry_limit) && ParseMapEntry(&in, &example, &error);
          if (valid) in.PopLimit(entry_limit);
        } else {
          valid = WireFormatLite::SkipField(&in, entry_tag);
        }
      }
      valid = valid && in.BytesUntilLimit() == 0;
      if (valid) in.PopLimit(features_limit);
    } else {
      valid = WireFormatLite::SkipField(&in, tag);
    }
  }
  if (!error.empty()) return absl::InvalidArgumentError(error);
  if (!valid || !in.ConsumedEntireMessage() ||
      in.CurrentPosition() != static_cast<int>(bytes.size())) {
    return absl::InvalidArgumentError("not a valid tf.train.Example");
  }
  if (example.features.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("feature '", kExampleFeaturesKey, "' (float_list) is missing or empty"));
  }
  if (example.label.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("feature '", kExampleLabelKey,
                                                   "' must hold exactly one int64, has ",
                                                   example.label.size()));
  }
  return example;
}

absl::Status WriteExampleTFRecord(const Dataset& dataset, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordWriter> writer, TFRecordWriter::Open(path));
  const int64_t size = dataset.example_size();
  if (dataset.features.size() != static_cast<size_t>(dataset.num_examples * size) ||
      dataset.labels.size() != static_cast<size_t>(dataset.num_examples)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": inconsistent dataset: ", dataset.num_examples, " examples of size ", size, " but ",
        dataset.features.size(), " values and ", dataset.labels.size(), " labels"));
  }
  for (int64_t i = 0; i < dataset.num_examples; ++i) {
    RETURN_IF_ERROR(
        writer->Write(EncodeExample(dataset.features.data() + i * size, static_cast<size_t>(size),
                                    dataset.labels[i], dataset.example_shape)));
  }
  return writer->Close();
}

absl::StatusOr<Dataset> ParseExampleTFRecord(std::string_view bytes, std::string_view name_view) {
  const absl::string_view name = ToAbsl(name_view);
  constexpr int64_t kMaxLabel = 1 << 20;  // as for CSV: larger is a mistake, not a class count
  TFRecordParser parser(bytes, std::string(name));
  Dataset dataset;
  std::string record;
  int32_t max_label = -1;
  for (int64_t index = 0;; ++index) {
    const uint64_t offset = parser.offset();
    ASSIGN_OR_RETURN(bool more, parser.ReadRecord(&record));
    if (!more) break;
    const auto where = [&] {
      return absl::StrCat(name, ": record ", index, " at byte offset ", offset, ": ");
    };
    absl::StatusOr<DecodedExample> example = DecodeExample(record);
    if (!example.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), example.status().message()));
    }
    std::vector<int64_t> shape = example->shape;
    if (shape.empty()) shape = {static_cast<int64_t>(example->features.size())};
    int64_t product = 1;
    for (int64_t d : shape) {
      if (d <= 0 || __builtin_mul_overflow(product, d, &product)) {
        product = -1;
        break;
      }
    }
    if (product != static_cast<int64_t>(example->features.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "shape does not match its ", example->features.size(), " values"));
    }
    if (index == 0) {
      dataset.example_shape = shape;
    } else if (shape != dataset.example_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "shape differs from the first record's"));
    }
    const int64_t label = example->label[0];
    if (label < 0 || label > kMaxLabel) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "label ", label, " is outside [0, ", kMaxLabel, "]"));
    }
    dataset.features.insert(dataset.features.end(), example->features.begin(),
                            example->features.end());
    dataset.labels.push_back(static_cast<int32_t>(label));
    max_label = std::max(max_label, static_cast<int32_t>(label));
  }
  if (dataset.labels.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no records"));
  }
  dataset.num_examples = static_cast<int64_t>(dataset.labels.size());
  dataset.num_classes = max_label + 1;
  return dataset;
}

absl::StatusOr<Dataset> LoadExampleTFRecord(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return ParseExampleTFRecord(bytes, path);
}

}  // namespace kubetrain::runtime::data
