#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace kubetrain::fake_apiserver {

// The kubelet's side of the fake API server's pods/log subresource: the
// container logs of every pod, and the streams that read them.
//
// There is no kubelet and no container runtime: a container runs when a test
// says so. Each start of a container (StartContainer) begins an empty log,
// its "run"; the run before it stays readable with previous=true, older ones
// are gone (a node keeps the current and the last terminated container).
// Lines are stamped with the server's clock when appended, strictly
// increasing. Pod status is the test's to set: these calls do not change it,
// and which run a request reads follows the runs, not the status.
//
// GET /api/v1/namespaces/NS/pods/NAME/log, as the API server answers it:
//  - container: required when the pod spec has more than one container
//    (400 "a container name must be specified for pod P, choose one of: [a b]");
//    one not in spec.containers or spec.initContainers is a 400;
//  - previous=true: the run before the current one (400 "previous terminated
//    container "c" in pod "p" not found" when there is none);
//  - a container with no run yet: 400 "container "c" in pod "p" is waiting to
//    start: REASON" (the waiting reason of its status, as the kubelet words
//    ErrImagePull and ImagePullBackOff), "... - no logs yet" without one;
//  - timestamps=true: each line starts with its RFC 3339 time (nanoseconds,
//    trailing zeros dropped, as Go's RFC3339Nano) and a space;
//  - sinceTime (RFC 3339) / sinceSeconds: only lines stamped at or after it;
//    both at once is a 400;
//  - follow=true: the response stays open and each line is sent as it is
//    appended; it ends when the run ends (StopContainer, or a new run),
//    when the pod is deleted, on DropLogStreams, or when the server stops.
//    Without follow the lines written so far are sent and the response ends.
// The body is text/plain in a chunked response, one chunk per line.
// Not implemented (400 naming the parameter, so that no test relies on a
// silent approximation): tailLines, limitBytes, insecureSkipTLSVerifyBackend.
// Partial lines do not exist here: every appended piece of text ends a line.
//
// Thread-safe. Lock order: the server's own lock may be held when Forget()
// is called; PodLogs never calls back into the server.
class PodLogs {
 public:
  // Per pod uid and container.
  absl::Status StartContainer(const std::string& uid, const std::string& container);
  absl::Status AppendLog(const std::string& uid, const std::string& container,
                         absl::string_view text);
  absl::Status StopContainer(const std::string& uid, const std::string& container);
  // The pod is gone: its logs go, its streams end.
  void Forget(const std::string& uid);
  void DropStreams();
  void Shutdown();

  struct Error {
    int code;
    std::string reason;
    std::string message;
  };
  // Serves one request for `pod` (the stored Pod object) with `query` (the
  // decoded URL parameters). Before anything is sent, a request that cannot
  // be served comes back as the Error the API server answers. Otherwise
  // `start()` is called once (send the response head), then `write(line)`
  // for every line (false: the client is gone), and nullopt is returned when
  // the response is over.
  std::optional<Error> Serve(const nlohmann::json& pod,
                             const std::map<std::string, std::string>& query,
                             const std::function<bool()>& start,
                             const std::function<bool(const std::string&)>& write);

 private:
  struct Line {
    absl::Time time;
    std::string text;
  };
  struct Run {
    std::vector<Line> lines;
    bool ended = false;
  };
  struct Container {
    std::deque<Run> runs;  // at most two: the previous and the current
    uint64_t starts = 0;   // how many runs were started in all
  };

  absl::StatusOr<Container*> Find(const std::string& uid, const std::string& container);
  absl::Time NextStamp();

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::map<std::string, Container>> pods_;  // uid -> container ->
  absl::Time last_stamp_ = absl::InfinitePast();
  uint64_t drop_generation_ = 0;
  bool stopping_ = false;
};

}  // namespace kubetrain::fake_apiserver
