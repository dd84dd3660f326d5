#include "trainer-runtime/data/dataset.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/data/file_io.h"
#include "trainer-runtime/data/test_util.h"

namespace kubetrain::runtime::data {
namespace {

using ::kubetrain::runtime::data::testing::Gzip;
using ::kubetrain::runtime::data::testing::MakeIdx;
using ::kubetrain::runtime::data::testing::ReadAll;
using ::kubetrain::runtime::data::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const char kFashionDir[] = "/usr/share/datasets/fashion-mnist";

bool HaveFashionMnist() {
  return std::filesystem::exists(std::string(kFashionDir) + "/train-images-idx3-ubyte.gz");
}

void ExpectFashionMnist(const Dataset& d, int64_t expected_examples) {
  EXPECT_EQ(d.num_examples, expected_examples);
  EXPECT_THAT(d.example_shape, ElementsAre(28, 28, 1));
  EXPECT_EQ(d.example_size(), 784);
  EXPECT_EQ(d.num_classes, 10);
  ASSERT_EQ(d.features.size(), static_cast<size_t>(expected_examples * 784));
  ASSERT_EQ(d.labels.size(), static_cast<size_t>(expected_examples));
  const auto [min_it, max_it] = std::minmax_element(d.features.begin(), d.features.end());
  EXPECT_EQ(*min_it, 0.0f);
  EXPECT_EQ(*max_it, 1.0f);
  // Fashion-MNIST is balanced: every class has a tenth of the examples.
  std::vector<int64_t> per_class(10, 0);
  for (int32_t label : d.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  for (int64_t c : per_class) EXPECT_EQ(c, expected_examples / 10);
}

TEST(LoadIdxTest, LoadsFashionMnistTrainAndTest) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto train = LoadIdx(std::string(kFashionDir) + "/train-images-idx3-ubyte.gz");
  ASSERT_TRUE(train.ok()) << train.status();
  ExpectFashionMnist(*train, 60000);
  auto test = LoadIdx(std::string(kFashionDir) + "/t10k-images-idx3-ubyte.gz");
  ASSERT_TRUE(test.ok()) << test.status();
  ExpectFashionMnist(*test, 10000);
}

TEST(LoadIdxTest, LabelsPathAndDirectoryWithPrefixFindTheSamePair) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto by_images = LoadIdx(std::string(kFashionDir) + "/t10k-images-idx3-ubyte.gz");
  auto by_labels = LoadIdx(std::string(kFashionDir) + "/t10k-labels-idx1-ubyte.gz");
  auto by_dir = LoadIdx(kFashionDir, "t10k");
  ASSERT_TRUE(by_images.ok()) << by_images.status();
  ASSERT_TRUE(by_labels.ok()) << by_labels.status();
  ASSERT_TRUE(by_dir.ok()) << by_dir.status();
  EXPECT_EQ(by_labels->labels, by_images->labels);
  EXPECT_EQ(by_dir->labels, by_images->labels);
  EXPECT_EQ(by_dir->features, by_images->features);
}

TEST(LoadIdxTest, DirectoryWithTwoPairsAndNoPrefixIsAmbiguous) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto d = LoadIdx(kFashionDir);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("t10k-images-idx3-ubyte.gz"));
  EXPECT_THAT(d.status().message(), HasSubstr("train-images-idx3-ubyte.gz"));
}

// A 3-image 2x2 dataset in a temp dir, raw or gzipped.
class IdxFilesTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string GoodImages() const {
    return MakeIdx({3, 2, 2}, {0, 51, 255, 102, 1, 2, 3, 4, 255, 255, 0, 0});
  }
  std::string GoodLabels() const { return MakeIdx({3}, {2, 0, 4}); }
  test_support::TempDir tmp_{"kubetrain-data"};
  const std::string dir_ = tmp_.path();
};

TEST_F(IdxFilesTest, ParsesRawAndGzippedFilesScalingPixels) {
  WriteFile(Path("x-images-idx3-ubyte"), GoodImages());
  WriteFile(Path("x-labels-idx1-ubyte"), GoodLabels());
  WriteFile(Path("y-images-idx3-ubyte.gz"), Gzip(GoodImages()));
  WriteFile(Path("y-labels-idx1-ubyte.gz"), Gzip(GoodLabels()));
  for (const char* name : {"x-images-idx3-ubyte", "y-images-idx3-ubyte.gz"}) {
    auto d = LoadIdx(Path(name));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->num_examples, 3);
    EXPECT_THAT(d->example_shape, ElementsAre(2, 2, 1));
    EXPECT_THAT(d->labels, ElementsAre(2, 0, 4));
    EXPECT_EQ(d->num_classes, 5);
    ASSERT_EQ(d->features.size(), 12u);
    EXPECT_EQ(d->features[0], 0.0f);
    EXPECT_FLOAT_EQ(d->features[1], 0.2f);
    EXPECT_EQ(d->features[2], 1.0f);
    EXPECT_FLOAT_EQ(d->features[3], 0.4f);
  }
}

TEST_F(IdxFilesTest, FindsGzippedLabelsBesideRawImages) {
  WriteFile(Path("z-images-idx3-ubyte"), GoodImages());
  WriteFile(Path("z-labels-idx1-ubyte.gz"), Gzip(GoodLabels()));
  auto d = LoadIdx(Path("z-images-idx3-ubyte"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->labels, ElementsAre(2, 0, 4));
}

TEST_F(IdxFilesTest, DirectoryWithOnePairLoadsIt) {
  WriteFile(Path("only-images-idx3-ubyte.gz"), Gzip(GoodImages()));
  WriteFile(Path("only-labels-idx1-ubyte.gz"), Gzip(GoodLabels()));
  WriteFile(Path("README"), "not data");
  auto d = LoadIdx(dir_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_examples, 3);
}

TEST_F(IdxFilesTest, EmptyDirectoryIsNotFound) {
  auto d = LoadIdx(dir_);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr(dir_));
}

TEST_F(IdxFilesTest, MissingImagesFileIsNotFound) {
  auto d = LoadIdx(Path("nope-images-idx3-ubyte.gz"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr("nope-images-idx3-ubyte.gz"));
}

TEST_F(IdxFilesTest, MissingLabelsFileNamesWhereItLooked) {
  WriteFile(Path("a-images-idx3-ubyte"), GoodImages());
  auto d = LoadIdx(Path("a-images-idx3-ubyte"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr(Path("a-labels-idx1-ubyte")));
  EXPECT_THAT(d.status().message(), HasSubstr(Path("a-labels-idx1-ubyte.gz")));
}

TEST_F(IdxFilesTest, UnconventionalNameIsRejected) {
  WriteFile(Path("images.bin"), GoodImages());
  auto d = LoadIdx(Path("images.bin"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("labels-idx1-ubyte"));
}

TEST_F(IdxFilesTest, TruncatedImageDataNamesTheFileAndSizes) {
  std::string images = GoodImages();
  images.pop_back();
  WriteFile(Path("t-images-idx3-ubyte"), images);
  WriteFile(Path("t-labels-idx1-ubyte"), GoodLabels());
  auto d = LoadIdx(Path("t-images-idx3-ubyte"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      d.status().message(),
      HasSubstr(Path("t-images-idx3-ubyte") +
                ": truncated: header declares 3x2x2 = 12 bytes of data but only 11 follow"));
}

TEST_F(IdxFilesTest, TruncatedHeaderIsDataLoss) {
  WriteFile(Path("h-images-idx3-ubyte"), GoodImages().substr(0, 9));
  WriteFile(Path("h-labels-idx1-ubyte"), GoodLabels());
  auto d = LoadIdx(Path("h-images-idx3-ubyte"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(),
              HasSubstr("truncated: 9 bytes, the IDX header of rank 3 needs 16"));
}

TEST_F(IdxFilesTest, TrailingBytesAreDataLoss) {
  WriteFile(Path("g-images-idx3-ubyte"), GoodImages());
  WriteFile(Path("g-labels-idx1-ubyte"), GoodLabels() + "xy");
  auto d = LoadIdx(Path("g-images-idx3-ubyte"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(),
              HasSubstr(Path("g-labels-idx1-ubyte") + ": 2 bytes of trailing data"));
}

TEST_F(IdxFilesTest, BadMagicNamesFoundAndExpected) {
  std::string labels = GoodLabels();
  labels[3] = 2;  // rank 2 instead of 1
  WriteFile(Path("m-images-idx3-ubyte"), GoodImages());
  WriteFile(Path("m-labels-idx1-ubyte"), labels);
  auto d = LoadIdx(Path("m-images-idx3-ubyte"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      d.status().message(),
      HasSubstr(Path("m-labels-idx1-ubyte") +
                ": bad magic number 0x00000802, expected 0x00000801 for an IDX labels file"));
}

TEST_F(IdxFilesTest, CountMismatchNamesBothFiles) {
  WriteFile(Path("c-images-idx3-ubyte"), GoodImages());
  WriteFile(Path("c-labels-idx1-ubyte"), MakeIdx({2}, {1, 1}));
  auto d = LoadIdx(Path("c-images-idx3-ubyte"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(),
              HasSubstr("count mismatch: " + Path("c-images-idx3-ubyte") + " holds 3 images but " +
                        Path("c-labels-idx1-ubyte") + " holds 2 labels"));
}

TEST_F(IdxFilesTest, TruncatedGzipOfTheRealFileIsDataLoss) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const std::string gz = ReadAll(std::string(kFashionDir) + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_GT(gz.size(), 100u);
  WriteFile(Path("cut-images-idx3-ubyte.gz"),
            ReadAll(std::string(kFashionDir) + "/t10k-images-idx3-ubyte.gz"));
  WriteFile(Path("cut-labels-idx1-ubyte.gz"), gz.substr(0, gz.size() / 2));
  auto d = LoadIdx(Path("cut-images-idx3-ubyte.gz"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(),
              HasSubstr(Path("cut-labels-idx1-ubyte.gz") + ": truncated gzip data"));
}

TEST_F(IdxFilesTest, CorruptGzipIsDataLoss) {
  std::string gz = Gzip(GoodImages());
  gz[gz.size() - 6] ^= 0x55;  // inside the CRC32 trailer
  WriteFile(Path("k-images-idx3-ubyte.gz"), gz);
  WriteFile(Path("k-labels-idx1-ubyte.gz"), Gzip(GoodLabels()));
  auto d = LoadIdx(Path("k-images-idx3-ubyte.gz"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(),
              HasSubstr(Path("k-images-idx3-ubyte.gz") + ": corrupt gzip data"));
}

TEST(ParseIdxTest, HugeDeclaredShapeIsTruncationNotAllocation) {
  const std::string images = MakeIdx({0xffffffff, 0xffffffff, 0xffffffff}, {1, 2, 3});
  const std::string labels = MakeIdx({0xffffffff}, {});
  auto d = ParseIdx(images, "img", labels, "lab");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status().message(), HasSubstr("img: truncated"));
}

TEST(ParseIdxTest, GzipBombIsCapped) {
  const std::string big(1 << 20, '\0');
  ParseLimits limits;
  limits.max_decompressed_bytes = 1000;
  auto d = ParseIdx(Gzip(big), "img", Gzip(big), "lab", limits);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(d.status().message(), HasSubstr("img: decompressed data exceeds the limit of 1000"));
}

TEST(GunzipTest, ConcatenatedMembersAreJoined) {
  auto out = Gunzip(Gzip("hello ") + Gzip("world"), "x", 100);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "hello world");
}

TEST(ParseCsvTest, HeaderBlankLinesAndCrlf) {
  auto d = ParseCsv("x1,x2,label\r\n0.5,-1,2\r\n\r\n1e-3, 4 ,0\n", "f.csv");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_examples, 2);
  EXPECT_THAT(d->example_shape, ElementsAre(2));
  EXPECT_THAT(d->features, ElementsAre(0.5f, -1.0f, 1e-3f, 4.0f));
  EXPECT_THAT(d->labels, ElementsAre(2, 0));
  EXPECT_EQ(d->num_classes, 3);
}

TEST(ParseCsvTest, RaggedRowNamesLine) {
  auto d = ParseCsv("1,2,0\n3,1\n", "f.csv");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("f.csv:2: 2 columns, earlier rows have 3"));
}

TEST(ParseCsvTest, BadNumberNamesLineAndColumn) {
  auto d = ParseCsv("a,b,c\n1,2,0\n3,x4,1\n", "f.csv");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("f.csv:3: column 2 is not a finite number: 'x4'"));
}

TEST(ParseCsvTest, LabelMustBeNonNegativeInteger) {
  for (const char* csv : {"1,2,-1\n", "1,2,0.5\n"}) {
    auto d = ParseCsv(csv, "f.csv");
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << csv;
    EXPECT_THAT(d.status().message(), HasSubstr("f.csv:1: label (column 3)")) << csv;
  }
}

TEST(ParseCsvTest, HeaderOnlyHasNoRows) {
  auto d = ParseCsv("a,b\n", "f.csv");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("f.csv: no data rows"));
}

TEST(LoadDatasetTest, DispatchesOnExtension) {
  test_support::TempDir tmp;
  const std::string dir = tmp.path();
  WriteFile(dir + "/d.csv", "1,2,1\n3,4,0\n");
  auto csv = LoadDataset(dir + "/d.csv");
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ(csv->num_examples, 2);
  auto idx = LoadDataset(dir + "/missing-images-idx3-ubyte.gz");
  EXPECT_EQ(idx.status().code(), absl::StatusCode::kNotFound);
}

TEST(LoadDatasetTest, PrefixChoosesThePairInADirectory) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto test = LoadDataset(kFashionDir, "t10k");
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_examples, 10000);
  EXPECT_EQ(LoadDataset(kFashionDir).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain::runtime::data
