#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/jobs_cluster.h"
#include "cli/ui/job_source.h"

namespace kubetrain::cli::ui {

// The TrainingJobs of one namespace of a cluster, read with the user's own
// credentials (ClusterJobs: the kubeconfig), the Events of each job and its
// pods, as `jobs describe` lists them (ClusterJobs::Events), and the replica
// pods' logs through pods/log, as `jobs stream-logs` reads them
// (cluster_logs.h): one stream per pod of the job, the current run of its
// training container, each line with the kubelet's time.
class ClusterJobSource : public JobSource {
 public:
  explicit ClusterJobSource(std::unique_ptr<ClusterJobs> jobs) : jobs_(std::move(jobs)) {}

  std::string backend() const override { return "cluster"; }
  std::string location() const override { return "namespace " + jobs_->namespace_name(); }
  absl::StatusOr<std::vector<v1::TrainingJob>> ListJobs() override { return jobs_->List(); }
  // A job whose Events cannot be listed (RBAC) still shows, with eventsError.
  absl::StatusOr<JobRecord> GetJob(const std::string& job_id) override;
  absl::StatusOr<std::vector<LogStream>> LogStreams(const std::string& job_id) override;
  absl::StatusOr<LogChunk> ReadLog(const std::string& job_id, const LogStream& stream,
                                   int64_t offset, int max_lines) override;

 private:
  std::unique_ptr<ClusterJobs> jobs_;
};

}  // namespace kubetrain::cli::ui
