#include "api/defaults.h"

#include <algorithm>

namespace kubetrain::api {

void ApplyDefaults(v1::TrainingJob* job) {
  if (job->api_version().empty()) job->set_api_version(kApiVersion);
  if (job->kind().empty()) job->set_kind(kKind);

  v1::TrainingJobSpec* spec = job->mutable_spec();
  if (!spec->has_port()) spec->set_port(kDefaultPort);
  if (spec->output_storage().has_new_claim() && spec->output_storage().new_claim().access_mode() ==
                                                    v1::NewOutputClaim::ACCESS_MODE_UNSPECIFIED) {
    spec->mutable_output_storage()->mutable_new_claim()->set_access_mode(
        v1::NewOutputClaim::ReadWriteMany);
  }

  v1::TrainingInput* input = spec->mutable_training_input();
  if (input->scale_tier() == v1::TrainingInput::SCALE_TIER_UNSPECIFIED) {
    input->set_scale_tier(v1::TrainingInput::BASIC);
  }
  if (input->scale_tier() == v1::TrainingInput::BASIC_GPU &&
      !input->master_config().accelerator_config().has_count()) {
    input->mutable_master_config()->mutable_accelerator_config()->set_count(1);
  }
  if (!input->scheduling().has_max_running_time()) {
    input->mutable_scheduling()->mutable_max_running_time()->set_seconds(
        kDefaultMaxRunningTimeSeconds);
  }

  if (input->has_hyperparameters()) {
    v1::HyperparameterSpec* hp = input->mutable_hyperparameters();
    if (hp->goal() == v1::HyperparameterSpec::GOAL_TYPE_UNSPECIFIED) {
      hp->set_goal(v1::HyperparameterSpec::MAXIMIZE);
    }
    // 0 is Cloud ML's unset (proto3), as validation reads it.
    if (hp->max_trials() == 0) hp->set_max_trials(1);
    if (hp->max_parallel_trials() == 0) hp->set_max_parallel_trials(1);
    if (!hp->has_max_failed_trials()) hp->set_max_failed_trials(0);
    if (hp->hyperparameter_metric_tag().empty()) {
      hp->set_hyperparameter_metric_tag(kDefaultMetricTag);
    }
  }

  v1::RunPolicy* policy = spec->mutable_run_policy();
  if (policy->restart_policy() == v1::RunPolicy::RESTART_POLICY_UNSPECIFIED) {
    policy->set_restart_policy(v1::RunPolicy::Never);
  }
  if (!policy->has_backoff_limit()) policy->set_backoff_limit(kDefaultBackoffLimit);
  if (policy->clean_pod_policy() == v1::RunPolicy::CLEAN_POD_POLICY_UNSPECIFIED) {
    policy->set_clean_pod_policy(v1::RunPolicy::Running);
  }
}

int EffectiveMaxTrials(const v1::HyperparameterSpec& spec) {
  return std::max(1, spec.max_trials());
}

// maxFailedTrials 0 lets the service decide. kubetrain fails the study when
// the failures reach a quarter of maxTrials, but never fewer than 3 (or
// maxTrials, if smaller): one flaky trial does not end a sweep, a broken
// trainer ends it early instead of burning the whole budget.
int EffectiveMaxFailedTrials(const v1::HyperparameterSpec& spec) {
  if (spec.max_failed_trials() > 0) return spec.max_failed_trials();
  const int max_trials = EffectiveMaxTrials(spec);
  return std::min(max_trials, std::max(3, (max_trials + 3) / 4));
}

}  // namespace kubetrain::api
