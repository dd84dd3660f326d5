// The cluster backend of `kubetrain jobs`: TrainingJobs in a namespace,
// created and read through the API server (jobs_cluster.h); the operator in
// the cluster runs them.
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/packages.h"
#include "api/validation.h"
#include "cli/jobs_backend.h"
#include "cli/package_build.h"
#include "operator/core/reconciler.h"

namespace kubetrain::cli {
namespace {

// Polls a job until it ends, printing progress changes when asked to.
absl::StatusOr<v1::TrainingJob> FollowJobState(ClusterJobs& cluster, const std::string& job_id,
                                               const FollowOptions& options, std::ostream& out) {
  std::string last;
  for (;;) {
    absl::StatusOr<v1::TrainingJob> job = cluster.Get(job_id);
    if (!job.ok()) return job.status();
    const std::string line = options.progress ? ProgressLine(*job) : "";
    if (!line.empty() && line != last) out << "[kubetrain] " << line << "\n" << std::flush;
    last = line;
    if (core::IsTerminal(job->status().state())) return job;
    absl::SleepFor(options.poll_interval.value_or(absl::Seconds(2)));
  }
}

// The sdist of --package-path for a cluster, which must fit the ConfigMap
// that carries it there.
absl::StatusOr<BuiltPackage> BuildClusterPackage(const std::string& package_path) {
  absl::StatusOr<BuiltPackage> built = BuildSdist(package_path);
  if (!built.ok() || built->bytes.size() <= api::kMaxConfigMapBytes) return built;
  return absl::InvalidArgumentError(absl::StrCat(
      "--package-path ", package_path, ": the package ", built->file_name, " is ",
      built->bytes.size(), " bytes, more than the ", api::kMaxConfigMapBytes,
      " bytes (1 MiB) a ConfigMap holds; serve it over http(s) and give its URL in packageUris, "
      "put it on a volume of the pod template and give its path there, or build it into an "
      "image (masterConfig.imageUri and the other roles')"));
}

class ClusterBackend : public JobsBackend {
 public:
  explicit ClusterBackend(ClusterTarget target) : target_(std::move(target)) {}

  absl::Status Open() override {
    absl::StatusOr<std::unique_ptr<ClusterJobs>> cluster = ClusterJobs::Connect(target_);
    if (!cluster.ok()) return cluster.status();
    cluster_ = *std::move(cluster);
    return absl::OkStatus();
  }

  absl::Status AttachPackage(const UserPackage& package, v1::TrainingJob& job) override {
    absl::StatusOr<BuiltPackage> built = BuildClusterPackage(package.path);
    if (!built.ok()) return built.status();
    v1::TrainingInput* input = job.mutable_spec()->mutable_training_input();
    input->clear_package_uris();
    input->add_package_uris(ClusterJobs::PackageUri(job.metadata().name(), built->file_name));
    package_ = *std::move(built);
    return absl::OkStatus();
  }

  absl::Status Submit(v1::TrainingJob job, bool, std::ostream& out) override {
    const std::string& name = job.metadata().name();
    if (absl::Status s =
            package_ ? cluster_->CreateWithPackage(job, *package_) : cluster_->Create(job);
        !s.ok()) {
      return s;
    }
    if (package_) {
      out << "Package [" << package_->file_name << "] stored in ConfigMap "
          << cluster_->namespace_name() << "/" << ClusterJobs::PackageConfigMapName(name) << ".\n";
    }
    out << "Job [" << name << "] submitted successfully.\n"
        << "TrainingJob " << cluster_->namespace_name() << "/" << api::KubernetesName(name) << "\n"
        << "  $ kubetrain jobs describe " << name << "\n";
    return absl::OkStatus();
  }

  absl::StatusOr<v1::TrainingJob> Get(const std::string& job_id) override {
    return cluster_->Get(job_id);
  }
  absl::StatusOr<std::vector<v1::HyperparameterOutput>> ArchivedTrials(
      const v1::TrainingJob& job) override {
    return cluster_->ArchivedTrials(job);
  }
  std::optional<absl::StatusOr<std::vector<JobEvent>>> Events(const v1::TrainingJob& job) override {
    return cluster_->Events(job);
  }
  absl::StatusOr<std::vector<v1::TrainingJob>> List() override { return cluster_->List(); }
  absl::Status Cancel(const std::string& job_id) override { return cluster_->Cancel(job_id); }

  absl::StatusOr<v1::TrainingJob> Follow(const std::string& job_id, const FollowOptions& options,
                                         std::ostream& out) override {
    if (!options.logs) return FollowJobState(*cluster_, job_id, options, out);
    ClusterLogOptions logs;
    logs.task_filter = options.task_filter;
    logs.trial_filter = options.trial_filter;
    logs.progress = options.progress;
    if (options.poll_interval) logs.poll_interval = *options.poll_interval;
    return cluster_->FollowLogs(job_id, logs, out);
  }

  absl::Status KeepUnfinishedJobsMoving() override { return absl::OkStatus(); }

 private:
  const ClusterTarget target_;
  std::unique_ptr<ClusterJobs> cluster_;
  std::optional<BuiltPackage> package_;  // --package-path's, stored by Submit
};

}  // namespace

std::unique_ptr<JobsBackend> ClusterJobsBackend(const ClusterTarget& target) {
  return std::make_unique<ClusterBackend>(target);
}

}  // namespace kubetrain::cli
