// One rank of a multi-process transport test (transport_multiprocess_test.cc
// spawns several). Protocol on stdin/stdout:
//   gRPC: prints "PORT <port>", reads "ADDRS <a0>,<a1>,...", connects.
//   shm:  connects to the group named by --group.
//   Then prints "CONNECTED" and, unless --stall, runs --iters ring
//   all-reduces of --count floats, checking each against the sum it can
//   compute itself (rank r contributes f(r, i)), and prints "OK".
// Exit codes: 0 ok, 1 wrong result or usage, 138 (retryable) when a peer was
// lost or timed out, with the error on stderr.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/flags/flags.h"
#include "trainer-runtime/dist/collectives.h"
#include "trainer-runtime/dist/grpc/grpc_transport.h"
#include "trainer-runtime/dist/shm/shm_transport.h"

namespace {

using namespace kubetrain::dist;

float Contribution(int rank, size_t i) { return static_cast<float>((rank + 1) * 3 + (i % 11)); }

int Exit(const absl::Status& status) {
  std::cerr << status << std::endl;
  return status.code() == absl::StatusCode::kUnavailable ||
                 status.code() == absl::StatusCode::kDeadlineExceeded
             ? 138
             : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string transport_name = "grpc", group = "test";
  int rank = 0, size = 1, iters = 3;
  size_t count = 1000;
  bool stall = false;
  double timeout_s = 30;
  double connect_timeout_s = 0;
  CLI::App app{"usage: runtime_dist_transport_peer [flags]"};
  kubetrain::flags::Configure(app);
  app.add_option("--transport", transport_name, "grpc or shm")->capture_default_str();
  app.add_option("--group", group, "the group's name")->capture_default_str();
  app.add_option("--rank", rank, "this process's rank")->capture_default_str();
  app.add_option("--size", size, "how many ranks")->capture_default_str();
  app.add_option("--iters", iters, "all-reduces to run")->capture_default_str();
  app.add_option("--count", count, "floats per all-reduce")->capture_default_str();
  app.add_option("--timeout_s", timeout_s, "deadline for the whole run")->capture_default_str();
  app.add_option("--connect_timeout_s", connect_timeout_s,
                 "deadline for joining the group (0: the run's)")
      ->capture_default_str();
  app.add_flag("--stall", stall, "connect, then wait without reducing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::cerr << kubetrain::flags::Describe(app, e) << std::endl;
    return 1;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  const absl::Time connect_deadline =
      connect_timeout_s > 0 ? absl::Now() + absl::Seconds(connect_timeout_s) : deadline;

  std::unique_ptr<Transport> transport;
  if (transport_name == "grpc") {
    GrpcTransport::Options options;
    options.group = group;
    auto t = GrpcTransport::Listen(rank, size, "127.0.0.1:0", options);
    if (!t.ok()) return Exit(t.status());
    std::cout << "PORT " << (*t)->port() << std::endl;
    std::string line;
    if (!std::getline(std::cin, line) || line.rfind("ADDRS ", 0) != 0) {
      std::cerr << "expected ADDRS on stdin" << std::endl;
      return 1;
    }
    std::vector<std::string> addresses = absl::StrSplit(line.substr(6), ',');
    absl::Status connected = (*t)->Connect(addresses, connect_deadline);
    if (!connected.ok()) return Exit(connected);
    transport = std::move(*t);
  } else if (transport_name == "shm") {
    auto t = ShmTransport::Connect(group, rank, size, connect_deadline);
    if (!t.ok()) return Exit(t.status());
    transport = std::move(*t);
  } else {
    std::cerr << "unknown transport " << transport_name << std::endl;
    return 1;
  }
  std::cout << "CONNECTED" << std::endl;
  if (stall) {
    // Waits for the test to kill it.
    std::string line;
    std::getline(std::cin, line);
    return 0;
  }
  std::vector<float> data(count);
  for (int it = 0; it < iters; ++it) {
    for (size_t i = 0; i < count; ++i) data[i] = Contribution(rank, i);
    absl::Status s = RingAllReduce(*transport, absl::MakeSpan(data), it, deadline);
    if (!s.ok()) return Exit(s);
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < size; ++r) expected += Contribution(r, i);
      if (data[i] != expected) {
        std::cerr << "rank " << rank << ": element " << i << " is " << data[i] << ", expected "
                  << expected << std::endl;
        return 1;
      }
    }
  }
  std::cout << "OK" << std::endl;
  return 0;
}
