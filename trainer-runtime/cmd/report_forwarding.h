#pragma once

// What `exec` and `collect` share: forwarding the new reports of a
// cloudml-hypertune metric file to the operator, and waiting on termination
// signals through a pipe (signal handlers write to it: threads started before
// main, e.g. OpenBLAS's, would take signals that are only blocked in ours).

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/hypertune/hypertune.h"
#include "trainer-runtime/cmd/trial_reporter.h"

namespace kubetrain::runtime::cmd {

// Queues the reports added to the metric file at `path` since the last poll
// (step = each report's global_step). A file that cannot be read is a
// warning, prefixed by `who` ("kubetrain-runtime exec"): the next poll tries
// again.
void ForwardNewReports(hypertune::HypertuneFileFollower& follower, const std::string& path,
                       TrialReporter& reporter, std::string_view who);

// Routes SIGTERM, SIGINT and SIGCHLD to a pipe; its non-blocking read end.
absl::StatusOr<int> CatchSignalsInAPipe();

// SIGTERM or SIGINT among the signals waiting in the pipe (forwarded to
// `child` while it runs, when child > 0); 0 when none.
int ReadTerminationSignal(int signals, pid_t child);

}  // namespace kubetrain::runtime::cmd
