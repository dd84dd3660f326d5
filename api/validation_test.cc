#include "api/validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "api/defaults.h"
#include "api/job_file.h"
#include "api/output_storage.h"
#include "api/python_runtimes.h"

namespace kubetrain::api {
namespace {

using ::testing::HasSubstr;

struct InvalidCase {
  std::string name;
  std::string yaml;
  std::string path;
  std::string reason;
  int line = 0;  // 0: not checked
};

// Prints the case name in failures.
void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.name; }

const char kJobHead[] = R"(apiVersion: kubetrain.io/v1
kind: TrainingJob
metadata:
  name: job1
spec:
  trainingInput:
)";

std::string Job(const std::string& training_input_body) {
  return std::string(kJobHead) + training_input_body;
}

// A tuning job whose params block is `params` (indented for spec.trainingInput.hyperparameters).
std::string Tuning(const std::string& params, const std::string& extra = "") {
  return Job("    scaleTier: BASIC\n    hyperparameters:\n      maxTrials: 4\n" + extra +
             "      params:\n" + params);
}

// `tuning` (a Tuning job) with maxTrials `n` instead of 4.
std::string ManyTrials(std::string tuning, int n) {
  const std::string four = "maxTrials: 4\n";
  tuning.replace(tuning.find(four), four.size(), "maxTrials: " + std::to_string(n) + "\n");
  return tuning;
}

const char kLr[] = R"(        - parameterName: lr
          type: DOUBLE
          minValue: 0.001
          maxValue: 0.1
)";

// A BASIC job with jobDir /outputs and `spec_extra` (spec-level lines).
std::string Stored(const std::string& spec_extra) {
  return std::string(kJobHead) + "    scaleTier: BASIC\n    jobDir: /outputs\n" + spec_extra;
}

// A PYTORCH master + 2 workers job (framework `framework`) with
// spec.elasticPolicy `policy` (a YAML flow mapping).
std::string Elastic(const std::string& policy, const std::string& framework = "PYTORCH") {
  return Job(
      "    scaleTier: CUSTOM\n    masterType: standard\n    workerType: standard\n"
      "    workerCount: 2\n    framework: " +
      framework +
      "\n    masterConfig: {containerCommand: [torchrun, train.py]}\n"
      "    workerConfig: {containerCommand: [torchrun, train.py]}\n"
      "  elasticPolicy: " +
      policy + "\n");
}

class InvalidInputTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidInputTest, ReportsExactPathAndReason) {
  const InvalidCase& c = GetParam();
  CheckedJob checked = CheckTrainingJob(c.yaml);
  ASSERT_FALSE(checked.ok()) << "accepted:\n" << c.yaml;
  std::vector<std::string> got;
  for (const FieldError& e : checked.errors) got.push_back(e.path + ": " + e.reason);
  // The planted error, and nothing else: each case shows one rule alone.
  EXPECT_THAT(got, ::testing::ElementsAre(c.path + ": " + c.reason)) << c.yaml;
  if (c.line > 0) {
    bool found_line = false;
    for (const FieldError& e : checked.errors) {
      if (e.path == c.path && e.reason == c.reason) found_line = e.line == c.line;
    }
    EXPECT_TRUE(found_line) << "expected line " << c.line;
  }
}

std::vector<InvalidCase> Cases() {
  return {
      // Syntax and document shape.
      {"empty_file", "", "",
       "the file is empty: expected a TrainingJob or a config with trainingInput"},
      {"only_comment", "# nothing here\n", "",
       "the file is empty: expected a TrainingJob or a config with trainingInput"},
      {"malformed_yaml", "trainingInput:\n  scaleTier: [BASIC\n", "",
       "end of sequence flow not found", 3},
      {"multi_document", Job("    scaleTier: BASIC\n") + "---\n" + Job("    scaleTier: BASIC\n"),
       "", "expected one YAML document, found 2 (split them into files)", 9},
      // yaml-cpp's LoadAll turns this stream into endless empty documents; it
      // must be an error, not a hang (found by the fuzzer).
      {"endless_documents", "#\n      -pe?: NVIDIA_TESLA_T4}\n&2, ty0eIA_TESLA_T4}\ntrain.ioic\n",
       "", "expected one YAML document, found more than 64 (split them into files)"},
      {"many_documents",
       [] {
         std::string yaml;
         for (int i = 0; i < 100; ++i) yaml += "---\na: 1\n";
         return yaml;
       }(),
       "", "expected one YAML document, found more than 64 (split them into files)", 4},
      {"not_utf8", "trainingInput:\n  region: \"caf\xe9\"\n", "",
       "input is not valid UTF-8 (byte offset 29)", 2},
      {"stray_comma", "- a\n,\n", "",
       "unexpected ',' outside a [...] or {...} list (quote the value if it is text)", 2},
      {"comma_after_flow", "trainingInput: {scaleTier: BASIC} ,\n", "",
       "unexpected ',' outside a [...] or {...} list (quote the value if it is text)", 1},
      {"top_level_list", "- a\n- b\n", "",
       "expected a TrainingJob or a config with trainingInput, got a list"},
      // Unknown fields and enum values, wrong types.
      {"unknown_field_hint", Job("    scaleTeir: BASIC\n"), "spec.trainingInput.scaleTeir",
       "unknown field \"scaleTeir\"; did you mean \"scaleTier\"?", 7},
      {"snake_case_field", Job("    scale_tier: BASIC\n"), "spec.trainingInput.scale_tier",
       "unknown field \"scale_tier\"; did you mean \"scaleTier\"?"},
      {"unknown_top_level_in_config", "trainingInput:\n  scaleTier: BASIC\nfoo: 1\n", "foo",
       "unknown field \"foo\"; a Cloud ML config holds trainingInput, labels and jobId", 3},
      {"unknown_enum", Job("    scaleTier: STANDARD_2\n"), "spec.trainingInput.scaleTier",
       "unknown value \"STANDARD_2\"; expected one of BASIC, STANDARD_1, PREMIUM_1, BASIC_GPU, "
       "BASIC_TPU, CUSTOM"},
      {"wrong_type_count",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    workerCount: many\n"),
       "spec.trainingInput.workerCount", "expected an integer, got \"many\""},
      {"fractional_count",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    workerCount: 1.5\n"),
       "spec.trainingInput.workerCount", "expected an integer, got \"1.5\""},
      {"args_not_list", Job("    args: --lr=0.1\n"), "spec.trainingInput.args",
       "expected a list, got \"--lr=0.1\""},
      {"bool_wrong", Job("    useChiefInTfConfig: yes\n"), "spec.trainingInput.useChiefInTfConfig",
       "expected true or false, got \"yes\""},
      {"scalar_for_message", Job("    hyperparameters: 3\n"), "spec.trainingInput.hyperparameters",
       "expected a mapping, got \"3\""},
      {"duplicate_key", Job("    region: a\n    region: b\n"), "spec.trainingInput.region",
       "duplicate key"},
      {"bad_duration", Job("    scheduling:\n      maxRunningTime: 2 hours\n"),
       "spec.trainingInput.scheduling.maxRunningTime",
       "expected a duration in seconds such as \"3600s\", got \"2 hours\""},
      {"infinite_number",
       Tuning("        - parameterName: lr\n          type: DOUBLE\n"
              "          minValue: .inf\n          maxValue: 1\n"),
       "spec.trainingInput.hyperparameters.params[0].minValue", "expected a number, got \".inf\""},
      // Resource identity.
      {"wrong_api_version",
       "apiVersion: kubeflow.org/v1\nkind: TrainingJob\nmetadata: {name: a}\n"
       "spec: {}\n",
       "apiVersion", "must be kubetrain.io/v1, got \"kubeflow.org/v1\""},
      {"wrong_kind", "apiVersion: kubetrain.io/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {}\n",
       "kind", "must be TrainingJob, got \"TFJob\""},
      {"missing_name", "apiVersion: kubetrain.io/v1\nkind: TrainingJob\nspec: {}\n",
       "metadata.name", "required"},
      {"name_digit_first", "kind: TrainingJob\nmetadata: {name: 1job}\nspec: {}\n", "metadata.name",
       "must start with a letter"},
      {"name_bad_char", "kind: TrainingJob\nmetadata: {name: my.job}\nspec: {}\n", "metadata.name",
       "may hold only letters, digits, '_' and '-', found '.'"},
      {"name_trailing_underscore", "kind: TrainingJob\nmetadata: {name: job_}\nspec: {}\n",
       "metadata.name", "must end with a letter or digit"},
      {"name_too_long",
       "kind: TrainingJob\nmetadata: {name: " + std::string(41, 'a') + "}\nspec: {}\n",
       "metadata.name", "at most 40 characters (pod names derived from it must fit 63), got 41"},
      {"namespace_placeholder",
       "kind: TrainingJob\nmetadata: {name: a, namespace: <namespace>}\nspec: {}\n",
       "metadata.namespace",
       "a namespace is a DNS label: at most 63 lowercase letters, digits and '-', starting and "
       "ending with a letter or digit, got \"<namespace>\""},
      {"namespace_upper_case",
       "kind: TrainingJob\nmetadata: {name: a, namespace: Team-A}\nspec: {}\n",
       "metadata.namespace",
       "a namespace is a DNS label: at most 63 lowercase letters, digits and '-', starting and "
       "ending with a letter or digit, got \"Team-A\""},
      // Scale tiers and replicas.
      {"custom_without_master", Job("    scaleTier: CUSTOM\n"), "spec.trainingInput.masterType",
       "required when scaleTier is CUSTOM"},
      {"custom_workers_without_type",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    workerCount: 2\n"),
       "spec.trainingInput.workerType", "required when workerCount is > 0"},
      {"negative_count",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    workerCount: -1\n"),
       "spec.trainingInput.workerCount", "must be >= 0, got -1"},
      {"absurd_count",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    parameterServerType: standard\n"
           "    parameterServerCount: 100000\n"),
       "spec.trainingInput.parameterServerCount", "must be <= 1000, got 100000"},
      {"count_on_predefined_tier", Job("    scaleTier: STANDARD_1\n    workerCount: 2\n"),
       "spec.trainingInput.workerCount", "only valid with scaleTier CUSTOM (got STANDARD_1)"},
      {"master_type_on_basic", Job("    masterType: standard\n"), "spec.trainingInput.masterType",
       "only valid with scaleTier CUSTOM (got BASIC)"},
      {"unknown_machine_type", Job("    scaleTier: CUSTOM\n    masterType: huge\n"),
       "spec.trainingInput.masterType",
       "unknown machine type \"huge\"; known types: standard, "
       "large_model, complex_model_s, complex_model_m, complex_model_l, standard_gpu, "
       "complex_model_m_gpu, complex_model_l_gpu, standard_p100, complex_model_m_p100, "
       "standard_v100, large_model_v100, complex_model_m_v100, complex_model_l_v100, "
       "n1-standard-4, n1-standard-8, n1-standard-16, n1-standard-32, n1-standard-64, "
       "n1-standard-96, n1-highmem-2, n1-highmem-4, n1-highmem-8, n1-highmem-16, n1-highmem-32, "
       "n1-highmem-64, n1-highmem-96, n1-highcpu-16, n1-highcpu-32, n1-highcpu-64, "
       "n1-highcpu-96, pod-template"},
      {"tpu_tier", Job("    scaleTier: BASIC_TPU\n"), "spec.trainingInput.scaleTier",
       "BASIC_TPU is not supported: kubetrain has no TPUs"},
      {"tpu_accelerator",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n"
           "    masterConfig:\n      acceleratorConfig: {count: 8, type: TPU_V3}\n"),
       "spec.trainingInput.masterConfig.acceleratorConfig.type",
       "\"TPU_V3\" is not supported: kubetrain has no TPUs"},
      {"tpu_worker",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    workerType: cloud_tpu\n"
           "    workerCount: 1\n"),
       "spec.trainingInput.workerType",
       "TPU machine type \"cloud_tpu\" is not supported: kubetrain has no TPUs"},
      {"accelerator_without_type", Job("    masterConfig:\n      acceleratorConfig: {count: 2}\n"),
       "spec.trainingInput.masterConfig.acceleratorConfig.type", "required when count is > 0"},
      {"accelerator_too_many",
       Job("    masterConfig:\n      acceleratorConfig: {count: 64, type: NVIDIA_TESLA_T4}\n"),
       "spec.trainingInput.masterConfig.acceleratorConfig.count",
       "must be between 0 and 16, got 64"},
      {"package_without_module", Job("    packageUris: [trainer-0.1.tar.gz]\n"),
       "spec.trainingInput.pythonModule", "required when packageUris is set"},
      {"bad_python_module",
       Job("    pythonModule: trainer/task.py\n    packageUris: [/pkgs/trainer-0.1.tar.gz]\n"),
       "spec.trainingInput.pythonModule",
       "must be a dotted Python module name such as trainer.task, got \"trainer/task.py\""},
      // Where a pythonModule's code comes from, and the runtime it runs in.
      {"module_without_code", Job("    scaleTier: STANDARD_1\n    pythonModule: trainer.task\n"),
       "spec.trainingInput.packageUris",
       "required for pythonModule trainer.task: the master, worker, ps replicas have neither a "
       "package that holds it (packageUris, or jobs submit training --package-path) nor an image "
       "that does (masterConfig.imageUri, workerConfig.imageUri, parameterServerConfig.imageUri)"},
      {"module_with_image_for_the_master_only",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    workerType: standard\n"
           "    workerCount: 2\n    pythonModule: trainer.task\n"
           "    masterConfig: {imageUri: registry.example.com/trainer:1}\n"),
       "spec.trainingInput.packageUris",
       "required for pythonModule trainer.task: the worker replica has neither a package that "
       "holds it (packageUris, or jobs submit training --package-path) nor an image that does "
       "(workerConfig.imageUri)"},
      {"package_uri_gs",
       Job("    pythonModule: trainer.task\n    packageUris: [/pkg/trainer-0.1.tar.gz, "
           "\"gs://my-bucket/trainer-0.1.tar.gz\"]\n"),
       "spec.trainingInput.packageUris[1]",
       "\"gs://my-bucket/trainer-0.1.tar.gz\" names object storage (gs://), which kubetrain "
       "cannot fetch packages from: give the package's local folder (jobs submit --package-path, "
       "which stores it in the cluster), an http(s):// URL, or a path in the replica's image or "
       "volumes",
       8},
      {"file_package_uri",
       Job("    pythonModule: trainer.task\n    packageUris: [\"file:///pkg/t-0.1.tar.gz\"]\n"),
       "spec.trainingInput.packageUris[0]",
       "\"file:///pkg/t-0.1.tar.gz\" is a file:// URI: give the path itself (/pkg/t-0.1.tar.gz)"},
      {"configmap_package_uri_without_file",
       Job("    pythonModule: trainer.task\n    packageUris: [\"configmap://Trainer\"]\n"),
       "spec.trainingInput.packageUris[0]",
       "\"configmap://Trainer\" is not configmap://NAME/FILE: NAME a ConfigMap of the job's "
       "namespace (lowercase letters, digits, '-' and '.'), FILE its key holding the package "
       "(letters, digits, '-', '_' and '.', such as trainer-0.1.tar.gz)"},
      {"empty_package_uri", Job("    pythonModule: trainer.task\n    packageUris: [\"\"]\n"),
       "spec.trainingInput.packageUris[0]", "must not be empty"},
      {"unknown_runtime_version",
       Job("    pythonModule: trainer.task\n    packageUris: [/pkg]\n"
           "    runtimeVersion: \"1.15\"\n"),
       "spec.trainingInput.runtimeVersion",
       "no runtime \"1.15\" in the runtime catalog (built in); on offer: " +
           PythonRuntimeCatalog::BuiltIn().OnOffer() + "; " + kRegisterRuntimeHint},
      {"unknown_python_version",
       Job("    pythonModule: trainer.task\n    packageUris: [/pkg]\n"
           "    pythonVersion: \"3.7\"\n"),
       "spec.trainingInput.pythonVersion",
       "no Python \"3.7\" in the runtime catalog (built in); on offer: " +
           PythonRuntimeCatalog::BuiltIn().OnOffer() + "; " + kRegisterRuntimeHint},
      {"empty_arg", Job("    args: ['']\n"), "spec.trainingInput.args[0]", "must not be empty"},
      {"zero_running_time", Job("    scheduling: {maxRunningTime: 0s}\n"),
       "spec.trainingInput.scheduling.maxRunningTime", "must be positive"},
      // Hyperparameters.
      {"no_params", Job("    hyperparameters:\n      maxTrials: 3\n"),
       "spec.trainingInput.hyperparameters.params",
       "at least one parameter is required for hyperparameter tuning"},
      {"min_greater_than_max",
       Tuning("        - parameterName: lr\n          type: DOUBLE\n          minValue: 0.5\n"
              "          maxValue: 0.1\n"),
       "spec.trainingInput.hyperparameters.params[0].minValue",
       "must be less than maxValue (0.1), got 0.5"},
      {"log_scale_nonpositive",
       Tuning(std::string(kLr) + "        - parameterName: wd\n          type: DOUBLE\n"
                                 "          minValue: 0\n          maxValue: 0.1\n"
                                 "          scaleType: UNIT_LOG_SCALE\n"),
       "spec.trainingInput.hyperparameters.params[1].minValue",
       "must be > 0 for UNIT_LOG_SCALE, got 0", 17},
      {"reverse_log_negative",
       Tuning("        - parameterName: m\n          type: DOUBLE\n          minValue: -1\n"
              "          maxValue: 0.9\n          scaleType: UNIT_REVERSE_LOG_SCALE\n"),
       "spec.trainingInput.hyperparameters.params[0].minValue",
       "must be > 0 for UNIT_REVERSE_LOG_SCALE, got -1"},
      {"missing_min",
       Tuning("        - parameterName: lr\n          type: DOUBLE\n          maxValue: 1\n"),
       "spec.trainingInput.hyperparameters.params[0].minValue", "required for DOUBLE parameters"},
      {"integer_fraction",
       Tuning("        - parameterName: units\n          type: INTEGER\n          minValue: 1.5\n"
              "          maxValue: 10\n"),
       "spec.trainingInput.hyperparameters.params[0].minValue",
       "must be an integer for INTEGER parameters"},
      {"missing_type",
       Tuning("        - parameterName: lr\n          minValue: 0\n          maxValue: 1\n"),
       "spec.trainingInput.hyperparameters.params[0].type",
       "required: one of DOUBLE, INTEGER, CATEGORICAL, DISCRETE"},
      {"categorical_without_values",
       Tuning("        - parameterName: opt\n          type: CATEGORICAL\n"),
       "spec.trainingInput.hyperparameters.params[0].categoricalValues",
       "required: at least one value for CATEGORICAL parameters"},
      {"categorical_duplicate",
       Tuning("        - parameterName: opt\n          type: CATEGORICAL\n"
              "          categoricalValues: [adam, sgd, adam]\n"),
       "spec.trainingInput.hyperparameters.params[0].categoricalValues[2]",
       "duplicate value \"adam\""},
      {"categorical_with_range",
       Tuning("        - parameterName: opt\n          type: CATEGORICAL\n"
              "          categoricalValues: [adam]\n          minValue: 1\n"),
       "spec.trainingInput.hyperparameters.params[0].minValue",
       "only valid for DOUBLE and INTEGER parameters"},
      {"discrete_unsorted",
       Tuning("        - parameterName: batch\n          type: DISCRETE\n"
              "          discreteValues: [32, 128, 64]\n"),
       "spec.trainingInput.hyperparameters.params[0].discreteValues[2]",
       "values must be strictly increasing: 64 follows 128"},
      {"discrete_empty",
       Tuning("        - parameterName: batch\n          type: DISCRETE\n          discreteValues: "
              "[]\n"),
       "spec.trainingInput.hyperparameters.params[0].discreteValues",
       "required: at least one value for DISCRETE parameters"},
      {"halving_and_median_rule",
       Tuning(kLr,
              "      enableTrialEarlyStopping: true\n"
              "      earlyStopping: {algorithm: SUCCESSIVE_HALVING}\n"),
       "spec.trainingInput.hyperparameters.enableTrialEarlyStopping",
       "turns on the median rule, and earlyStopping.algorithm is SUCCESSIVE_HALVING: choose one"},
      {"halving_settings_without_halving",
       Tuning(kLr, "      earlyStopping: {algorithm: MEDIAN, reductionFactor: 3}\n"),
       "spec.trainingInput.hyperparameters.earlyStopping.reductionFactor",
       "only valid with algorithm SUCCESSIVE_HALVING"},
      {"pausing_without_halving",
       Tuning(kLr, "      earlyStopping: {algorithm: MEDIAN, pauseAtRungs: true}\n"),
       "spec.trainingInput.hyperparameters.earlyStopping.pauseAtRungs",
       "only valid with algorithm SUCCESSIVE_HALVING"},
      {"pausing_too_many_trials",
       ManyTrials(
           Tuning(kLr,
                  "      earlyStopping: {algorithm: SUCCESSIVE_HALVING, pauseAtRungs: true}\n"),
           101),
       "spec.trainingInput.hyperparameters.earlyStopping.pauseAtRungs",
       "needs maxTrials of at most 100 (paused trials stay in status until the study ends), got "
       "101"},
      {"halving_reduction_factor",
       Tuning(kLr, "      earlyStopping: {algorithm: SUCCESSIVE_HALVING, reductionFactor: 1}\n"),
       "spec.trainingInput.hyperparameters.earlyStopping.reductionFactor",
       "must be between 2 and 10, got 1"},
      {"halving_min_reports",
       Tuning(kLr, "      earlyStopping: {algorithm: SUCCESSIVE_HALVING, minResource: 101}\n"),
       "spec.trainingInput.hyperparameters.earlyStopping.minResource",
       "must be between 1 and 100 reports (a trial's status keeps its last 100), got 101"},
      {"halving_min_steps",
       Tuning(kLr,
              "      earlyStopping: {algorithm: SUCCESSIVE_HALVING, resource: STEPS, "
              "minResource: 0}\n"),
       "spec.trainingInput.hyperparameters.earlyStopping.minResource", "must be >= 1, got 0"},
      {"halving_unknown_algorithm", Tuning(kLr, "      earlyStopping: {algorithm: HYPERBAND}\n"),
       "spec.trainingInput.hyperparameters.earlyStopping.algorithm",
       "unknown value \"HYPERBAND\"; expected one of MEDIAN, SUCCESSIVE_HALVING"},
      {"discrete_values_on_double",
       Tuning("        - parameterName: lr\n          type: DOUBLE\n          minValue: 0.1\n"
              "          maxValue: 1\n          discreteValues: [1, 2]\n"),
       "spec.trainingInput.hyperparameters.params[0].discreteValues",
       "only valid for DISCRETE parameters, not DOUBLE"},
      {"duplicate_param_names", Tuning(std::string(kLr) + kLr),
       "spec.trainingInput.hyperparameters.params[1].parameterName",
       "duplicate name \"lr\" (also params[0])"},
      {"bad_param_name",
       Tuning("        - parameterName: 'learning rate'\n          type: DOUBLE\n"
              "          minValue: 0.1\n          maxValue: 1\n"),
       "spec.trainingInput.hyperparameters.params[0].parameterName",
       "must start with a letter and hold only letters, digits, '_' and '-', got \"learning "
       "rate\""},
      {"param_also_in_args",
       Job("    args: [--epochs=3, --lr=0.5]\n    hyperparameters:\n      params:\n" +
           std::string(kLr)),
       "spec.trainingInput.args[1]", "sets \"lr\", which params[0] tunes; remove it from args"},
      {"parallel_above_max", Tuning(kLr, "      maxParallelTrials: 8\n"),
       "spec.trainingInput.hyperparameters.maxParallelTrials", "must be <= maxTrials (4), got 8"},
      {"negative_max_trials",
       Job("    hyperparameters:\n      maxTrials: -1\n      params:\n" + std::string(kLr)),
       "spec.trainingInput.hyperparameters.maxTrials",
       "must be between 1 and 10000 (0: unset, 1), got -1"},
      {"negative_parallel_trials", Tuning(kLr, "      maxParallelTrials: -1\n"),
       "spec.trainingInput.hyperparameters.maxParallelTrials", "must be >= 1, got -1"},
      {"negative_failed_trials", Tuning(kLr, "      maxFailedTrials: -2\n"),
       "spec.trainingInput.hyperparameters.maxFailedTrials", "must be >= 0, got -2"},
      {"grid_with_double", Tuning(kLr, "      algorithm: GRID_SEARCH\n"),
       "spec.trainingInput.hyperparameters.params[0].type",
       "GRID_SEARCH needs INTEGER, DISCRETE or CATEGORICAL parameters, got DOUBLE"},
      {"unknown_goal", Tuning(kLr, "      goal: BIGGER\n"),
       "spec.trainingInput.hyperparameters.goal",
       "unknown value \"BIGGER\"; expected one of MAXIMIZE, MINIMIZE"},
      {"resume_without_params",
       Job("    hyperparameters:\n      maxTrials: 30\n      resumePreviousJobId: hyper1_1\n"),
       "spec.trainingInput.hyperparameters.params",
       "at least one parameter is required for hyperparameter tuning, also when resuming job "
       "\"hyper1_1\": a TrainingJob lists them (kubetrain jobs submit training copies them from "
       "the earlier job when a Cloud ML config leaves them out)"},
      {"bad_resume_id", Tuning(kLr, "      resumePreviousJobId: 9lives\n"),
       "spec.trainingInput.hyperparameters.resumePreviousJobId", "must start with a letter"},
      // Run policy and kubetrain extensions.
      {"negative_backoff",
       std::string(kJobHead) + "    scaleTier: BASIC\n  runPolicy: {backoffLimit: -1}\n",
       "spec.runPolicy.backoffLimit", "must be >= 0"},
      {"zero_deadline",
       std::string(kJobHead) + "    scaleTier: BASIC\n  runPolicy: {activeDeadlineSeconds: 0}\n",
       "spec.runPolicy.activeDeadlineSeconds", "must be > 0"},
      {"zero_min_available",
       std::string(kJobHead) +
           "    scaleTier: BASIC\n  runPolicy: {schedulingPolicy: {minAvailable: 0}}\n",
       "spec.runPolicy.schedulingPolicy.minAvailable", "must be >= 1"},
      {"zero_schedule_timeout",
       std::string(kJobHead) +
           "    scaleTier: BASIC\n  runPolicy: {schedulingPolicy: {scheduleTimeoutSeconds: 0}}\n",
       "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds", "must be >= 1"},
      {"unknown_restart_policy",
       std::string(kJobHead) + "    scaleTier: BASIC\n  runPolicy: {restartPolicy: Sometimes}\n",
       "spec.runPolicy.restartPolicy",
       "unknown value \"Sometimes\"; expected one of Never, OnFailure, ExitCode, Always"},
      {"bad_port", std::string(kJobHead) + "    scaleTier: BASIC\n  port: 70000\n", "spec.port",
       "must be between 1 and 65535, got 70000"},
      {"bad_replica_template_role",
       std::string(kJobHead) + "    scaleTier: BASIC\n  replicaTemplates:\n    chief: {spec: {}}\n",
       "spec.replicaTemplates[chief]", "unknown role; expected master, worker, ps or evaluator"},
      // PyTorch jobs: ranks are the master and the workers.
      {"pytorch_on_standard_1",
       Job("    scaleTier: STANDARD_1\n    framework: PYTORCH\n"
           "    masterConfig: {containerCommand: [python3, train.py]}\n"
           "    workerConfig: {containerCommand: [python3, train.py]}\n"),
       "spec.trainingInput.scaleTier",
       "STANDARD_1 has 3 parameter servers; a PYTORCH job has none (its ranks are the master and "
       "the workers): use CUSTOM without parameter servers, or framework TENSORFLOW"},
      {"pytorch_with_parameter_servers",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    parameterServerType: standard\n"
           "    parameterServerCount: 2\n    framework: PYTORCH\n"
           "    masterConfig: {containerCommand: [python3, train.py]}\n"),
       "spec.trainingInput.parameterServerCount",
       "2 parameter servers; a PYTORCH job has none (its ranks are the master and the workers): "
       "use CUSTOM without parameter servers, or framework TENSORFLOW"},
      {"pytorch_worker_without_command",
       Job("    scaleTier: CUSTOM\n    masterType: standard\n    workerType: standard\n"
           "    workerCount: 2\n    framework: PYTORCH\n"
           "    masterConfig: {containerCommand: [python3, train.py]}\n"),
       "spec.trainingInput.workerConfig.containerCommand",
       "required for a PYTORCH job without pythonModule or an image of its own (imageUri, whose "
       "entrypoint runs): kubetrain-runtime trains from TF_CONFIG, which a PYTORCH job does not "
       "get"},
      // Elastic groups: torchrun's, of the master and the workers.
      {"elastic_without_pytorch", Elastic("{minReplicas: 2}", "ANY"), "spec.elasticPolicy",
       "needs spec.trainingInput.framework: PYTORCH (an elastic group is torchrun's; TF_CONFIG "
       "names a fixed set of workers)"},
      {"elastic_min_zero", Elastic("{minReplicas: 0}"), "spec.elasticPolicy.minReplicas",
       "must be >= 1, got 0"},
      {"elastic_min_above_the_nodes", Elastic("{minReplicas: 4}"), "spec.elasticPolicy.minReplicas",
       "4 is more than the job's 3 nodes (the master and workerCount workers): the group could "
       "never start"},
      {"elastic_max_below_the_nodes", Elastic("{maxReplicas: 2}"), "spec.elasticPolicy.maxReplicas",
       "must be at least minReplicas and the job's 3 nodes (the master and workerCount workers), "
       "got 2"},
      {"elastic_unknown_backend", Elastic("{rdzvBackend: zookeeper}"),
       "spec.elasticPolicy.rdzvBackend", "expected c10d, etcd or etcd-v2, got \"zookeeper\""},
      {"elastic_etcd_without_host", Elastic("{rdzvBackend: etcd}"), "spec.elasticPolicy.rdzvHost",
       "required with rdzvBackend etcd: the etcd the nodes rendezvous at"},
      {"elastic_port", Elastic("{rdzvPort: 0}"), "spec.elasticPolicy.rdzvPort",
       "must be between 1 and 65535, got 0"},
      {"elastic_conf_with_a_comma", Elastic("{rdzvConf: [{key: a, value: \"1,2\"}]}"),
       "spec.elasticPolicy.rdzvConf[0]",
       "needs a key without '=' or ',' and a value without ',' (torchrun reads "
       "key=value,key=value)"},
      {"elastic_restarts", Elastic("{maxRestarts: -1}"), "spec.elasticPolicy.maxRestarts",
       "must be >= 0, got -1"},
      {"nproc_per_node_word",
       std::string(kJobHead) +
           "    framework: PYTORCH\n"
           "    masterConfig: {containerCommand: [torchrun, train.py]}\n  nprocPerNode: all\n",
       "spec.nprocPerNode",
       "expected a number of processes (1 to 1024), auto, gpu or cpu, got \"all\""},
      {"nproc_per_node_zero",
       std::string(kJobHead) +
           "    framework: PYTORCH\n"
           "    masterConfig: {containerCommand: [torchrun, train.py]}\n  nprocPerNode: \"0\"\n",
       "spec.nprocPerNode",
       "expected a number of processes (1 to 1024), auto, gpu or cpu, got \"0\""},
      {"nproc_per_node_tensorflow",
       std::string(kJobHead) + "    framework: TENSORFLOW\n  nprocPerNode: \"2\"\n",
       "spec.nprocPerNode",
       "is torchrun's, and a TENSORFLOW job gets no PyTorch variables: use framework PYTORCH or "
       "ANY"},
      {"unknown_framework", Job("    framework: JAX\n"), "spec.trainingInput.framework",
       "unknown value \"JAX\"; expected one of ANY, TENSORFLOW, PYTORCH"},
      // Object-store URIs where kubetrain needs a folder it can reach.
      {"gs_job_dir", Job("    scaleTier: BASIC\n    jobDir: gs://my-bucket/run1\n"),
       "spec.trainingInput.jobDir",
       "\"gs://my-bucket/run1\" names object storage (gs://), which kubetrain does not support: "
       "it reads and writes local folders only; put the data on a volume and give the folder it "
       "is mounted at (on Kubernetes, spec.outputStorage mounts a claim at jobDir)",
       8},
      {"gs_data_path_in_args",
       Job("    scaleTier: BASIC\n    args: [--hidden1=8, --train-data-paths, "
           "\"gs://b/train.csv\"]\n"),
       "spec.trainingInput.args[2]",
       "--train-data-paths: \"gs://b/train.csv\" names object storage (gs://), which kubetrain "
       "does not support: it reads and writes local folders only; put the data on a volume and "
       "give the folder it is mounted at"},
      {"s3_output_path_in_container_args",
       Job("    scaleTier: BASIC\n    masterConfig:\n      containerArgs: "
           "[\"--output_path=s3://b/out\"]\n"),
       "spec.trainingInput.masterConfig.containerArgs[0]",
       "--output_path: \"s3://b/out\" names object storage (s3://), which kubetrain does not "
       "support: it reads and writes local folders only; put the data on a volume and give the "
       "folder it is mounted at"},
      {"gs_package_uri",
       Job("    scaleTier: BASIC\n    pythonModule: trainer.task\n    packageUris: [/pkg, "
           "gs://b/trainer-0.1.tar.gz]\n"),
       "spec.trainingInput.packageUris[1]",
       "\"gs://b/trainer-0.1.tar.gz\" names object storage (gs://), which kubetrain cannot "
       "fetch packages from: give the package's local folder (jobs submit --package-path, which "
       "stores it in the cluster), an http(s):// URL, or a path in the replica's image or "
       "volumes"},
      // spec.outputStorage: the storage jobDir lives on.
      {"output_storage_empty", Stored("  outputStorage: {subPath: runs}\n"), "spec.outputStorage",
       "set one of claimName, volumeName and newClaim"},
      {"output_storage_two_kinds",
       Stored("  outputStorage: {claimName: outputs, newClaim: {size: 1Gi}}\n"),
       "spec.outputStorage", "set only one of claimName, volumeName and newClaim"},
      {"output_storage_without_job_dir",
       std::string(kJobHead) + "    scaleTier: BASIC\n  outputStorage: {claimName: outputs}\n",
       "spec.trainingInput.jobDir",
       "required with spec.outputStorage: the folder the storage is mounted at"},
      {"output_storage_relative_job_dir",
       std::string(kJobHead) +
           "    scaleTier: BASIC\n    jobDir: out\n  outputStorage: {claimName: outputs}\n",
       "spec.trainingInput.jobDir",
       "must be an absolute path with spec.outputStorage (the storage is mounted there), got "
       "\"out\""},
      {"output_storage_root_job_dir",
       std::string(kJobHead) +
           "    scaleTier: BASIC\n    jobDir: /\n  outputStorage: {claimName: outputs}\n",
       "spec.trainingInput.jobDir",
       "must not be \"/\" with spec.outputStorage: the storage is mounted there"},
      {"output_claim_name", Stored("  outputStorage: {claimName: My_Outputs}\n"),
       "spec.outputStorage.claimName",
       "must hold only lowercase letters, digits, '-' and '.' (a Kubernetes name), got "
       "\"My_Outputs\""},
      {"output_volume_missing", Stored("  outputStorage: {volumeName: nfs}\n"),
       "spec.outputStorage.volumeName", "no volume \"nfs\" in spec.template.spec.volumes"},
      {"output_volume_empty_dir",
       Stored("  outputStorage: {volumeName: scratch}\n"
              "  template: {spec: {volumes: [{name: scratch, emptyDir: {}}]}}\n"),
       "spec.outputStorage.volumeName",
       "volume \"scratch\" is an emptyDir, which goes with its pod: name a claim, NFS or other "
       "volume every replica shares"},
      {"output_claim_size_missing",
       Stored("  outputStorage: {newClaim: {storageClassName: nfs}}\n"),
       "spec.outputStorage.newClaim.size", "required: the claim's size, e.g. \"10Gi\""},
      {"output_claim_size_bad", Stored("  outputStorage: {newClaim: {size: 10GB}}\n"),
       "spec.outputStorage.newClaim.size",
       "must be a positive quantity such as \"10Gi\" or \"500Mi\", got \"10GB\""},
      {"output_claim_size_zero", Stored("  outputStorage: {newClaim: {size: \"0\"}}\n"),
       "spec.outputStorage.newClaim.size",
       "must be a positive quantity such as \"10Gi\" or \"500Mi\", got \"0\""},
      {"output_claim_access_mode",
       Stored("  outputStorage: {newClaim: {size: 1Gi, accessMode: ReadOnlyMany}}\n"),
       "spec.outputStorage.newClaim.accessMode",
       "unknown value \"ReadOnlyMany\"; expected one of ReadWriteOnce, ReadWriteMany"},
      {"output_sub_path_escapes",
       Stored("  outputStorage: {claimName: outputs, subPath: a/../..}\n"),
       "spec.outputStorage.subPath",
       "must be a relative path inside the volume, without \"..\", got \"a/../..\""},
      {"output_storage_and_template_mount",
       Stored("  outputStorage: {claimName: outputs}\n"
              "  template: {spec: {containers: [{name: kubetrain, volumeMounts: [{name: nfs, "
              "mountPath: /outputs/}]}], volumes: [{name: nfs, nfs: {server: s, path: /}}]}}\n"),
       "spec.outputStorage",
       "spec.template already mounts volume \"nfs\" at jobDir (/outputs): remove that mount, or "
       "remove spec.outputStorage"},
      // Bare Cloud ML configs report paths as written.
      {"bare_config_paths",
       "trainingInput:\n  hyperparameters:\n    params:\n      - parameterName: lr\n"
       "        type: DOUBLE\n        minValue: 0\n        maxValue: 1\n"
       "        scaleType: UNIT_LOG_SCALE\n",
       "trainingInput.hyperparameters.params[0].minValue", "must be > 0 for UNIT_LOG_SCALE, got 0",
       6},
  };
}

INSTANTIATE_TEST_SUITE_P(Table, InvalidInputTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(ValidationTest, ReportsEveryErrorNotJustTheFirst) {
  CheckedJob checked = CheckTrainingJob(Job(
      "    scaleTier: CUSTOM\n    workerCount: -3\n    hyperparameters:\n      maxTrials: -1\n"));
  // In the order of the file, each at its line, not just the first.
  EXPECT_EQ(
      FormatErrors(checked.errors),
      "6:3: spec.trainingInput.masterType: required when scaleTier is CUSTOM\n"
      "8:5: spec.trainingInput.workerCount: must be >= 0, got -3\n"
      "9:5: spec.trainingInput.hyperparameters.params: at least one parameter is required "
      "for hyperparameter tuning\n"
      "10:7: spec.trainingInput.hyperparameters.maxTrials: must be between 1 and 10000 (0: unset, "
      "1), got -1\n");
}

// Cloud ML went on with the earlier study's params when a config that resumes
// one lists none: a bare config may, and submission copies them in.
TEST(ValidationTest, ABareConfigThatResumesAStudyMayLeaveItsParamsToIt) {
  CheckedJob checked = CheckTrainingJob(
      "trainingInput:\n  hyperparameters:\n    maxTrials: 30\n    resumePreviousJobId: hyper1_1\n");
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  EXPECT_TRUE(LeavesParamsToResumedJob(checked.job));

  v1::TrainingJob earlier;
  v1::HyperparameterSpec* theirs =
      earlier.mutable_spec()->mutable_training_input()->mutable_hyperparameters();
  theirs->set_goal(v1::HyperparameterSpec::MINIMIZE);
  theirs->set_hyperparameter_metric_tag("loss");
  theirs->add_params()->set_parameter_name("lr");
  v1::TrainingJob job = checked.job;
  ASSERT_TRUE(TakeResumedStudyParams(earlier, &job).ok());
  const v1::HyperparameterSpec& ours = job.spec().training_input().hyperparameters();
  EXPECT_EQ(ours.params(0).parameter_name(), "lr");
  EXPECT_EQ(ours.goal(), v1::HyperparameterSpec::MINIMIZE);
  EXPECT_EQ(ours.hyperparameter_metric_tag(), "loss");
  EXPECT_EQ(ours.max_trials(), 30);
  EXPECT_FALSE(LeavesParamsToResumedJob(job));

  // A goal the config sets stays (the operator then refuses the mismatch).
  v1::TrainingJob maximizing = checked.job;
  maximizing.mutable_spec()->mutable_training_input()->mutable_hyperparameters()->set_goal(
      v1::HyperparameterSpec::MAXIMIZE);
  ASSERT_TRUE(TakeResumedStudyParams(earlier, &maximizing).ok());
  EXPECT_EQ(maximizing.spec().training_input().hyperparameters().goal(),
            v1::HyperparameterSpec::MAXIMIZE);

  v1::TrainingJob not_a_study;
  v1::TrainingJob again = checked.job;
  absl::Status refused = TakeResumedStudyParams(not_a_study, &again);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "job \"hyper1_1\" is not a hyperparameter tuning job: it has no params to go on with");
}

// Cloud ML's API is proto3, where 0 is the field left unset: configs that ran
// there with maxTrials or maxParallelTrials 0 ran with the default, 1.
TEST(ValidationTest, ZeroTrialCountsAreCloudMlsUnsetAndDefaultToOne) {
  CheckedJob checked =
      CheckTrainingJob(Job("    hyperparameters:\n      maxTrials: 0\n"
                           "      maxParallelTrials: 0\n      params:\n" +
                           std::string(kLr)));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  ApplyDefaults(&checked.job);
  EXPECT_EQ(checked.job.spec().training_input().hyperparameters().max_trials(), 1);
  EXPECT_EQ(checked.job.spec().training_input().hyperparameters().max_parallel_trials(), 1);
}

TEST(ValidationTest, ValidJobHasNoErrors) {
  CheckedJob checked = CheckTrainingJob(Tuning(kLr, "      maxParallelTrials: 2\n"));
  EXPECT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  // Its master running its image's entrypoint: a sidecar reports the trials.
  checked = CheckTrainingJob(Tuning(kLr) +
                             "    masterConfig: {imageUri: registry.example.com/trainer:1}\n");
  EXPECT_TRUE(checked.ok()) << FormatErrors(checked.errors);
}

TEST(ValidationTest, EachEarlyStoppingRuleIsValid) {
  for (const char* stopping :
       {"      enableTrialEarlyStopping: true\n", "      earlyStopping: {algorithm: MEDIAN}\n",
        "      earlyStopping: {algorithm: SUCCESSIVE_HALVING}\n",
        "      earlyStopping: {algorithm: SUCCESSIVE_HALVING, resource: STEPS, minResource: 500, "
        "reductionFactor: 4}\n",
        "      earlyStopping: {algorithm: SUCCESSIVE_HALVING, pauseAtRungs: true}\n"}) {
    CheckedJob checked = CheckTrainingJob(Tuning(kLr, stopping));
    EXPECT_TRUE(checked.ok()) << stopping << FormatErrors(checked.errors);
  }
}

TEST(ValidationTest, PyTorchJobsWithACommandAModuleOrAnImageAreValid) {
  for (const std::string& body : {
           std::string("    scaleTier: CUSTOM\n    masterType: standard\n    workerType: standard\n"
                       "    workerCount: 2\n    framework: PYTORCH\n"
                       "    masterConfig: {containerCommand: [python3, train.py]}\n"
                       "    workerConfig: {containerCommand: [python3, train.py]}\n"),
           std::string("    framework: PYTORCH\n    pythonModule: trainer.task\n"
                       "    packageUris: [/pkg]\n"),
           // The master's evaluators are no ranks, but still run something.
           std::string("    framework: PYTORCH\n    evaluatorCount: 1\n"
                       "    masterConfig: {containerCommand: [python3, train.py]}\n"
                       "    evaluatorConfig: {containerCommand: [python3, eval.py]}\n"),
           // Images of their own: their entrypoints are the PyTorch trainer.
           std::string("    scaleTier: CUSTOM\n    masterType: standard\n    workerType: standard\n"
                       "    workerCount: 2\n    framework: PYTORCH\n"
                       "    masterConfig: {imageUri: registry.example.com/trainer:1}\n"
                       "    workerConfig: {imageUri: registry.example.com/trainer:1}\n"),
           // Elastic: between 2 and 3 nodes, or exactly the job's (nothing
           // given), or at an etcd.
           std::string("    scaleTier: CUSTOM\n    masterType: standard\n    workerType: standard\n"
                       "    workerCount: 2\n    framework: PYTORCH\n"
                       "    masterConfig: {containerCommand: [torchrun, train.py]}\n"
                       "    workerConfig: {containerCommand: [torchrun, train.py]}\n"
                       "  elasticPolicy: {minReplicas: 2, maxReplicas: 3, maxRestarts: 3}\n"),
           std::string("    framework: PYTORCH\n"
                       "    masterConfig: {containerCommand: [torchrun, train.py]}\n"
                       "  elasticPolicy: {}\n"),
           std::string("    framework: PYTORCH\n"
                       "    masterConfig: {containerCommand: [torchrun, train.py]}\n"
                       "  elasticPolicy: {rdzvBackend: etcd-v2, rdzvHost: etcd, rdzvPort: 2379, "
                       "rdzvConf: [{key: join_timeout, value: \"900\"}]}\n"),
           // Parameter servers are fine for the other frameworks.
           std::string("    scaleTier: STANDARD_1\n    framework: ANY\n"),
           std::string("    scaleTier: STANDARD_1\n    framework: TENSORFLOW\n"),
       }) {
    CheckedJob checked = CheckTrainingJob(Job(body));
    EXPECT_TRUE(checked.ok()) << body << FormatErrors(checked.errors);
  }
}

TEST(ValidationTest, LocalPathsAndOtherFlagsWithUrisAreAccepted) {
  // Only the path flags are paths: another flag may well hold a URL.
  CheckedJob checked = CheckTrainingJob(
      Job("    scaleTier: BASIC\n    jobDir: /outputs/run:1\n    args: [--output_path, out, "
          "\"--train_data_paths=/data/a.csv,/data/b.csv\", \"--notify=https://example.com/x\"]\n"));
  EXPECT_TRUE(checked.ok()) << FormatErrors(checked.errors);
}

TEST(ValidationTest, EachKindOfOutputStorageIsAccepted) {
  for (const std::string& storage :
       {std::string("  outputStorage: {claimName: team-outputs, subPath: runs/job1}\n"),
        std::string("  outputStorage: {volumeName: nfs}\n"
                    "  template: {spec: {volumes: [{name: nfs, nfs: {server: s, path: /x}}]}}\n"),
        std::string("  outputStorage: {newClaim: {size: 2.5Gi, storageClassName: nfs-client, "
                    "accessMode: ReadWriteOnce, deleteWhenFinished: true}}\n"),
        std::string("  outputStorage: {newClaim: {size: 500M, storageClassName: \"\"}}\n"),
        // A template mount above jobDir is another folder: no conflict.
        std::string("  outputStorage: {claimName: outputs}\n"
                    "  template: {spec: {containers: [{volumeMounts: [{name: data, mountPath: "
                    "/data}]}], volumes: [{name: data, emptyDir: {}}]}}\n")}) {
    CheckedJob checked = CheckTrainingJob(Stored(storage));
    EXPECT_TRUE(checked.ok()) << storage << FormatErrors(checked.errors);
  }
}

TEST(OutputStorageTest, TemplateMountForFindsTheDeepestMountHoldingAFolder) {
  CheckedJob checked = CheckTrainingJob(Stored(
      "  template: {spec: {containers: [{name: sidecar, volumeMounts: [{name: other, mountPath: "
      "/outputs}]}, {name: kubetrain, volumeMounts: [{name: root, mountPath: /}, {name: nfs, "
      "mountPath: /outputs/, subPath: team}, {name: scratch, mountPath: /outputs-tmp}]}], "
      "volumes: [{name: nfs, nfs: {server: s, path: /x}}, {name: scratch, emptyDir: {}}]}}\n"));
  ASSERT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  const v1::TrainingJobSpec& spec = checked.job.spec();
  std::optional<TemplateMount> mount = TemplateMountFor(spec, "/outputs/run1");
  ASSERT_TRUE(mount.has_value());
  EXPECT_EQ(mount->volume_name, "nfs");  // not the sidecar's, not the root's
  EXPECT_EQ(mount->sub_path, "team");
  EXPECT_TRUE(mount->volume_found);
  EXPECT_FALSE(mount->empty_dir);
  mount = TemplateMountFor(spec, "/outputs-tmp");
  ASSERT_TRUE(mount.has_value());
  EXPECT_TRUE(mount->empty_dir);
  mount = TemplateMountFor(spec, "/elsewhere");
  ASSERT_TRUE(mount.has_value());
  EXPECT_EQ(mount->volume_name, "root");
  EXPECT_FALSE(mount->volume_found);
  EXPECT_FALSE(TemplateMountFor(spec, "relative/outputs").has_value());
}

TEST(OutputStorageTest, OutputFolderIsJobDirElseTheLastOutputFlag) {
  v1::TrainingInput input;
  input.add_args("--output_path=/a");
  input.add_args("--job-dir");
  input.add_args("/b");
  EXPECT_EQ(OutputFolder(input), "/b");
  input.set_job_dir("/c");
  EXPECT_EQ(OutputFolder(input), "/c");
  EXPECT_EQ(OutputFolder(v1::TrainingInput()), "");
}

TEST(ValidationTest, PythonModuleCodeFromPackagesOrImages) {
  for (const std::string& body : {
           // A package for every replica, from a path, a URL or the cluster.
           std::string("    scaleTier: STANDARD_1\n    pythonModule: trainer.task\n"
                       "    packageUris: [/pkg/trainer-0.1.tar.gz, "
                       "\"https://pkgs.example.com/util-1.0-py3-none-any.whl\", "
                       "\"configmap://job1-package/trainer-0.0.0.tar.gz\"]\n"),
           // Images that hold the module; a role with its own command needs none.
           std::string("    scaleTier: CUSTOM\n    masterType: standard\n    workerType: standard\n"
                       "    workerCount: 2\n    pythonModule: trainer.task\n"
                       "    masterConfig: {imageUri: registry.example.com/trainer:1}\n"
                       "    workerConfig: {containerCommand: [python3, worker.py]}\n"),
           // The runtime on offer, by its versions.
           "    pythonModule: trainer.task\n    packageUris: [/pkg]\n    runtimeVersion: \"" +
               PythonRuntimeCatalog::BuiltIn().runtimes()[0].runtime_version +
               "\"\n    pythonVersion: \"" +
               PythonRuntimeCatalog::BuiltIn().runtimes()[0].python_version + "\"\n",
       }) {
    CheckedJob checked = CheckTrainingJob(Job(body));
    EXPECT_TRUE(checked.ok()) << body << FormatErrors(checked.errors);
  }
}

TEST(PythonRuntimesTest, UnsetVersionsMeanKubetrainsOwnRuntime) {
  const PythonRuntimeCatalog& built_in = PythonRuntimeCatalog::BuiltIn();
  ASSERT_FALSE(built_in.runtimes().empty());
  const PythonRuntime* own = built_in.Find("", "");
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own, &built_in.runtimes()[0]);
  EXPECT_EQ(own->python_version, "3.11");  // Debian 12's python3, the images' base
  EXPECT_EQ(own->image, "kubetrain/kubetrain-python-runtime:" KUBETRAIN_TEST_VERSION);
  EXPECT_EQ(own->python, "python3");
  EXPECT_EQ(built_in.Find(own->runtime_version, "2.7"), nullptr);
  EXPECT_EQ(built_in.Find("1.15", ""), nullptr);
  EXPECT_EQ(built_in.source(), "built in");
}

constexpr char kTensorFlowCatalog[] =
    "# runtimes of this cluster\n"
    "runtimes:\n"
    "- runtimeVersion: 1.15\n"
    "  pythonVersion: 3.7\n"
    "  image: registry.example.com/tf:1.15-py3.7\n"
    "  python: python3.7\n"
    "- runtimeVersion: \"2.11\"\n"
    "  pythonVersion: \"3.7\"\n"
    "  image: registry.example.com/tf:2.11\n";

TEST(PythonRuntimesTest, ACatalogFileAddsRuntimesBesideTheBuiltInOne) {
  absl::StatusOr<PythonRuntimeCatalog> catalog =
      PythonRuntimeCatalog::Parse(kTensorFlowCatalog, "runtimes.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  ASSERT_EQ(catalog->runtimes().size(), 3u);
  EXPECT_EQ(catalog->source(), "runtimes.yaml");
  // Unset versions still mean kubetrain's own runtime.
  EXPECT_EQ(catalog->Find("", "")->image, PythonRuntimeCatalog::BuiltIn().Find("", "")->image);
  const PythonRuntime* tf1 = catalog->Find("1.15", "");  // a YAML number, as written
  ASSERT_NE(tf1, nullptr);
  EXPECT_EQ(tf1->image, "registry.example.com/tf:1.15-py3.7");
  EXPECT_EQ(tf1->python, "python3.7");
  EXPECT_EQ(catalog->Find("2.11", "3.7")->python, "python3");
  EXPECT_EQ(catalog->Find("2.11", "3.5"), nullptr);
  EXPECT_EQ(catalog->Find("", "3.7"), tf1);

  // What validation then accepts, and what it still refuses, naming the file.
  const std::string job =
      "apiVersion: kubetrain.io/v1\nkind: TrainingJob\nmetadata: {name: j}\n"
      "spec:\n  trainingInput:\n    pythonModule: trainer.task\n"
      "    packageUris: [/pkg]\n    runtimeVersion: \"1.15\"\n";
  CheckedJob checked = CheckTrainingJob(job, true, &*catalog);
  EXPECT_TRUE(checked.ok()) << FormatErrors(checked.errors);
  checked = CheckTrainingJob(job);
  ASSERT_EQ(checked.errors.size(), 1u);
  EXPECT_THAT(checked.errors[0].reason,
              HasSubstr("no runtime \"1.15\" in the runtime catalog (built in)"));
  checked = CheckTrainingJob(job + "    pythonVersion: \"2.7\"\n", true, &*catalog);
  ASSERT_EQ(checked.errors.size(), 1u);
  EXPECT_EQ(checked.errors[0].path, "spec.trainingInput.pythonVersion");
  EXPECT_THAT(checked.errors[0].reason,
              HasSubstr("no Python \"2.7\" for runtimeVersion 1.15 in the runtime catalog "
                        "(runtimes.yaml); on offer: "));
  EXPECT_THAT(checked.errors[0].reason, HasSubstr("runtimeVersion 1.15 with pythonVersion 3.7 "
                                                  "(registry.example.com/tf:1.15-py3.7)"));
}

TEST(PythonRuntimesTest, AnEntryForTheBuiltInPairReplacesIt) {
  const PythonRuntime& own = PythonRuntimeCatalog::BuiltIn().runtimes()[0];
  absl::StatusOr<PythonRuntimeCatalog> catalog = PythonRuntimeCatalog::Parse(
      "runtimes:\n- {runtimeVersion: \"" + own.runtime_version + "\", pythonVersion: \"" +
          own.python_version + "\", image: mirror.example.com/kubetrain-python-runtime}\n",
      "mirror.yaml");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  ASSERT_EQ(catalog->runtimes().size(), 1u);
  EXPECT_EQ(catalog->Find("", "")->image, "mirror.example.com/kubetrain-python-runtime");
}

TEST(PythonRuntimesTest, ABadCatalogNamesTheLineAndTheField) {
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"", ""},  // empty: nothing registered
           {"runtimes: []\n", ""},
           {"runtimes:\n- runtimeVersion: \"1.15\"\n  image: x\n",
            "c.yaml:2: runtimes[0].pythonVersion: required"},
           {"runtimes:\n- runtimeVersion: \"1.15\"\n  pythonVersion: \"3.7\"\n  image: \"\"\n",
            "c.yaml:4: runtimes[0].image: must be a non-empty string"},
           {"runtimes:\n- {runtimeVersion: \"1.15\", pythonVersion: \"3.7\", image: x, "
            "imageUri: y}\n",
            "c.yaml:2: runtimes[0]: unknown field \"imageUri\" (known: runtimeVersion, "
            "pythonVersion, image, python)"},
           {"runtimes:\n- {runtimeVersion: \"1.15\", pythonVersion: \"3.7\", image: x}\n"
            "- {runtimeVersion: \"1.15\", pythonVersion: \"3.7\", image: y}\n",
            "c.yaml:3: runtimes[1]: runtimeVersion 1.15 with pythonVersion 3.7 is registered "
            "twice"},
           {"runtime:\n- {}\n",
            "c.yaml:1: unknown field \"runtime\" (a catalog has one: runtimes)"},
           {"runtimes: {a: b}\n", "c.yaml:1: runtimes: must be a list"},
           {"- a\n", "c.yaml:1: must be a mapping with a `runtimes` list"},
           {"runtimes: [\n", "c.yaml:2: not YAML: "},
       }) {
    SCOPED_TRACE(text);
    absl::StatusOr<PythonRuntimeCatalog> catalog = PythonRuntimeCatalog::Parse(text, "c.yaml");
    if (message.empty()) {
      ASSERT_TRUE(catalog.ok()) << catalog.status();
      EXPECT_EQ(catalog->runtimes().size(), 1u);
    } else {
      ASSERT_FALSE(catalog.ok());
      EXPECT_THAT(catalog.status().message(), HasSubstr(message));
    }
  }
  absl::StatusOr<PythonRuntimeCatalog> missing = PythonRuntimeCatalog::Load("/nonexistent/r.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/r.yaml"));
}

TEST(JobNameTest, KubernetesNameLowercasesAndReplacesUnderscores) {
  EXPECT_EQ(KubernetesName("fmnist_HPTuning_2"), "fmnist-hptuning-2");
  EXPECT_EQ(ValidateJobName("fmnist_hptuning"), "");
  EXPECT_EQ(ValidateJobName("census-job"), "");
}

// A file edited in place (a mounted ConfigMap) is read again; a version
// that does not read keeps the catalog as it was and says why, once.
TEST(RuntimeCatalogFileTest, FollowsTheFileAndKeepsTheLastGoodVersion) {
  const std::string path = ::testing::TempDir() + "/runtime_catalog_file_test.yaml";
  std::remove(path.c_str());
  std::vector<std::string> reports;
  RuntimeCatalogFile file(
      path, [&](const std::string& r) { reports.push_back(r); }, std::chrono::seconds(0));
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::trunc) << text; };
  // No file yet: the built-in runtimes, and the reason.
  EXPECT_EQ(file.Current()->runtimes().size(), 1u);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_THAT(reports[0], HasSubstr("the runtimes stay the built-in ones"));

  write(kTensorFlowCatalog);
  EXPECT_NE(file.Current()->Find("1.15", "3.7"), nullptr);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_THAT(reports[1], HasSubstr("runtimeVersion 1.15 with pythonVersion 3.7"));
  file.Current();  // unchanged: not read again, nothing said
  EXPECT_EQ(reports.size(), 2u);

  write("runtimes:\n- {runtimeVersion: \"2.1\"}\n");
  EXPECT_NE(file.Current()->Find("1.15", "3.7"), nullptr);  // kept
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_THAT(reports[2], HasSubstr("the runtimes stay as they were"));
  EXPECT_THAT(reports[2], HasSubstr(path + ":2: runtimes[0].pythonVersion: required"));

  write("runtimes:\n- {runtimeVersion: \"2.1\", pythonVersion: \"3.7\", image: tf:2.1}\n");
  std::shared_ptr<const PythonRuntimeCatalog> edited = file.Current();
  EXPECT_EQ(edited->Find("1.15", ""), nullptr);
  EXPECT_EQ(edited->Find("2.1", "3.7")->image, "tf:2.1");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kubetrain::api
