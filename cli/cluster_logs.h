#pragma once

// `kubetrain jobs stream-logs` and `jobs submit … --stream-logs` on a
// cluster: every replica's container log, read through the API server
// (pods/log?follow=true), and the job's Events, printed as the local backend
// prints them (cli/jobs_format.h FormatLogEntry: severity, time, task, trial,
// message; the job's Events as task "service"), until the job ends.
//
// How the logs are followed:
//  1. Every polling interval the job is read (its state ends the follow) and
//     its pods listed by the kubetrain.io/job-name label; each pod not yet
//     followed (a new trial's, a recreated one: another uid) gets a follower
//     thread, if it passes the --task-name/--trial filters.
//  2. A follower reads the previous run of the container (previous=true:
//     lines written before a restart it has not seen), then follows the
//     current one (follow=true, timestamps=true). Lines carry the kubelet's
//     timestamps; after the first read every request asks for sinceTime = the
//     last line's stamp and drops what it has printed, so a reconnect (a
//     dropped connection, the container restarted in place) repeats nothing.
//     Before the first new line of a current run is printed, the previous
//     run is read again up to that line: the container may have restarted
//     between the two requests, and what its earlier run wrote last comes
//     first.
//  3. When a read ends the follower looks at the pod: gone (or another
//     uid), or Succeeded/Failed, and it is done; else the container will run
//     again, and it reads again after the polling interval. A container
//     that has not started (400 "waiting to start") is retried likewise.
//  4. Once the job has ended, followers of pods that ended (Succeeded,
//     Failed) read all their containers left, however slow the API server
//     (up to 30 s); those of pods still running (a parameter server under
//     cleanPodPolicy None) are stopped after `drain`.
// Lines of one replica are printed in the order written; replicas interleave
// as their lines arrive. The API merges stdout and stderr, so a line's
// severity is judged as if it came from stderr (an error report reads as
// ERROR wherever it was written). A run that starts and ends between two
// reads (two restarts between them) loses its lines: the kubelet keeps only
// the last terminated run.
//
// RBAC: the user needs get/list on trainingjobs, pods and events and get on
// pods/log in the namespace; the operator needs none of it.

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kubetrain/v1/training_job.pb.h"

namespace kubetrain::kube {
class ClusterClient;
}

namespace kubetrain::cli {

struct ClusterLogOptions {
  // "master-replica-0" as the local backend names tasks; "service": only the
  // job's events; "": everything.
  std::string task_filter;
  std::string trial_filter;  // "": every trial; else that trial's lines only
  absl::Duration poll_interval = absl::Seconds(1);
  // Also print the job's state changes and a study's progress line
  // ("[kubetrain] ..."), as `submit --stream-logs` does.
  bool progress = false;
  // After the job ended: how long containers still running may keep writing.
  absl::Duration drain = absl::Seconds(3);
};

// Follows the TrainingJob `job_object_name` in `ns` until it has ended,
// reading it with `get_job` (which names the job as the user knows it in its
// errors). Returns the final job, or the first error reading the job or its
// pods that is not a passing one (Unavailable is retried for a while).
absl::StatusOr<v1::TrainingJob> FollowClusterLogs(
    kube::ClusterClient& client, const std::string& ns, const std::string& job_object_name,
    const std::function<absl::StatusOr<v1::TrainingJob>()>& get_job,
    const ClusterLogOptions& options, std::ostream& out);

// One replica's pod, as logs name it.
struct ReplicaPod {
  std::string name;
  std::string uid;
  std::string task;   // "worker-replica-1", as the local backend names it
  std::string trial;  // "" outside studies
};

// The pods of the job whose object is `job_object_name` that are its
// replicas (they carry the kubetrain.io role and index labels), in the
// API server's order.
absl::StatusOr<std::vector<ReplicaPod>> ListReplicaPods(kube::ClusterClient& client,
                                                        const std::string& ns,
                                                        const std::string& job_object_name);

// The training container's current log as it stands (no follow), each line
// "<RFC 3339 time> <message>\n", as the kubelet stamps it. 400 (a container
// that has not started) and 404 (no such pod) come back as the API said.
absl::StatusOr<std::string> ReadReplicaLog(kube::ClusterClient& client, const std::string& ns,
                                           const std::string& pod);

}  // namespace kubetrain::cli
