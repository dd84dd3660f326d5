#include "api/template_placeholder.h"

#include "absl/strings/str_replace.h"
#include "api/codec.h"
#include "api/job_file.h"
#include "api/kubeflow.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::api {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

TEST(TemplatePlaceholderTest, WholeValuesOfEachTemplatingTool) {
  for (const char* placeholder :
       {"$NUM_NODES", "${IMAGE_URI}", "$(trainingName)", "%numPs%", "<namespace>",
        "<dockerimage:tag>", "{{ .Values.image }}", "repo/trainer:{{ .Values.tag }}"}) {
    EXPECT_THAT(WholeValuePlaceholder(placeholder), Optional(std::string(placeholder)));
  }
  for (const char* value : {"2", "pytorch", "$", "a$b", "--lr=$LR", "<a> and <b>", "100%",
                            "nvidia.com/gpu", "", "$(", "50%-off", "{{"}) {
    EXPECT_EQ(WholeValuePlaceholder(value), std::nullopt) << value;
  }
}

TEST(TemplatePlaceholderTest, TheFirstPlaceholderOfALine) {
  EXPECT_THAT(PlaceholderInLine("      replicas: %numPs%"), Optional(std::string("%numPs%")));
  EXPECT_THAT(PlaceholderInLine("image: {{ .Values.image }} # set"),
              Optional(std::string("{{ .Values.image }}")));
  EXPECT_THAT(PlaceholderInLine("image: ${IMAGE_URI}"), Optional(std::string("${IMAGE_URI}")));
  EXPECT_EQ(PlaceholderInLine("replicas: 2  # 100% of them"), std::nullopt);
}

constexpr char kTemplated[] = R"yaml(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: $(trainingName)
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: $NUM_NODES
      template:
        spec:
          containers:
            - name: pytorch
              image: ${IMAGE_URI}
              command: [sh, -c, "torchrun --nnodes $NUM_NODES train.py"]
              args: ["--model_dir=$(modelDir)", "${HF_TOKEN}"]
              env:
                - {name: HF_TOKEN, value: "${HF_TOKEN}"}
              resources:
                limits:
                  nvidia.com/gpu: $GPU_PER_NODE
)yaml";

// Kubernetes expands `$(NAME)` in a container's command, args and env, and a
// shell the rest: only the other fields' placeholders are named, each at its
// line, in place of what their values break (a name, a count).
TEST(TemplatePlaceholderTest, ARefusedManifestIsRefusedForItsPlaceholders) {
  CheckedJob checked = CheckTrainingJob(kTemplated, /*require_name=*/false, nullptr);
  std::vector<std::string> errors;
  for (const FieldError& error : checked.errors) errors.push_back(error.ToString());
  const std::string advice =
      " is a template placeholder left in the file: fill it in first (envsubst, kustomize or "
      "helm template), or write the value";
  EXPECT_THAT(
      errors,
      ElementsAre("4:3: metadata.name: \"$(trainingName)\"" + advice,
                  "8:7: spec.pytorchReplicaSpecs.Worker.replicas: \"$NUM_NODES\"" + advice,
                  "13:15: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image: "
                  "\"${IMAGE_URI}\"" +
                      advice,
                  "20:19: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources."
                  "limits.nvidia.com/gpu: \"$GPU_PER_NODE\"" +
                      advice));
}

// Kubernetes stores `image: ${IMAGE}` as it is, and so does kubetrain: a
// placeholder in a string is named only when the manifest is refused.
TEST(TemplatePlaceholderTest, APlaceholderOnlyInAStringConverts) {
  const std::string text = absl::StrReplaceAll(
      kTemplated, {{"$(trainingName)", "llm"}, {"$NUM_NODES", "2"}, {"$GPU_PER_NODE", "1"}});
  CheckedJob checked = CheckTrainingJob(text, /*require_name=*/false, nullptr);
  EXPECT_TRUE(checked.errors.empty()) << checked.errors[0].ToString();
  EXPECT_EQ(checked.job.spec().training_input().master_config().image_uri(), "${IMAGE_URI}");
}

TEST(TemplatePlaceholderTest, YamlThatDoesNotParseForAPlaceholderSaysSo) {
  DecodedDocument decoded = DecodeDocument("spec:\n  replicas: %numPs%\n");
  ASSERT_EQ(decoded.errors.size(), 1u);
  EXPECT_EQ(decoded.errors[0].line, 2);
  EXPECT_THAT(decoded.errors[0].reason,
              HasSubstr(": \"%numPs%\" is a template placeholder left in the file"));
  // Other YAML errors are told as before.
  decoded = DecodeDocument("spec:\n  replicas: [1\n");
  ASSERT_EQ(decoded.errors.size(), 1u);
  EXPECT_THAT(decoded.errors[0].reason, ::testing::Not(HasSubstr("placeholder")));
}

}  // namespace
}  // namespace kubetrain::api
