// All-reduce of float32 buffers between ranks that are separate processes,
// over kubetrain's gRPC or shared-memory transport. Rank 0 prints one line
// per size:
//   RESULT <impl> <bytes> <iters> <us_per_op> <busbw_GBps>
// with bus bandwidth = 2(n-1)/n * bytes / time, as nccl-tests defines it.
// run.sh starts the ranks and the peers from other libraries. --ring_bytes
// and --spin_iterations set ShmTransport::Options.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flags/flags.h"
#include "trainer-runtime/dist/collectives.h"
#include "trainer-runtime/dist/grpc/grpc_transport.h"
#include "trainer-runtime/dist/shm/shm_transport.h"

namespace {

using namespace kubetrain::dist;

// Iterations per size: enough for a stable mean, short on a busy machine.
int ItersFor(size_t bytes) {
  if (bytes <= (64 << 10)) return 2000;
  if (bytes <= (1 << 20)) return 400;
  if (bytes <= (16 << 20)) return 60;
  return 12;
}

}  // namespace

int main(int argc, char** argv) {
  std::string transport_name = "shm", group = "kubetrain-bench", addresses_flag;
  int rank = 0, size = 2;
  ShmTransport::Options shm_options;
  std::vector<size_t> sizes = {4 << 10, 256 << 10, 4 << 20, 64 << 20};
  std::string bytes_flag;
  CLI::App app{"usage: allreduce_bench [flags]"};
  kubetrain::flags::Configure(app);
  app.add_option("--transport", transport_name, "grpc or shm")->capture_default_str();
  app.add_option("--group", group, "the shm group's name")->capture_default_str();
  app.add_option("--rank", rank, "this process's rank")->capture_default_str();
  app.add_option("--size", size, "how many ranks")->capture_default_str();
  app.add_option("--addresses", addresses_flag, "grpc: host:port of every rank, comma-separated");
  app.add_option("--ring_bytes", shm_options.ring_bytes, "ShmTransport::Options::ring_bytes")
      ->capture_default_str();
  app.add_option("--spin_iterations", shm_options.spin_iterations,
                 "ShmTransport::Options::spin_iterations")
      ->capture_default_str();
  app.add_option("--bytes", bytes_flag, "buffer sizes to measure, comma-separated");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::cerr << kubetrain::flags::Describe(app, e) << std::endl;
    return 2;
  }
  if (!bytes_flag.empty()) {
    sizes.clear();
    for (absl::string_view s : absl::StrSplit(bytes_flag, ',')) {
      size_t bytes = 0;
      if (!absl::SimpleAtoi(s, &bytes)) {
        std::cerr << "--bytes: " << s << " is not a size in bytes" << std::endl;
        return 2;
      }
      sizes.push_back(bytes);
    }
  }
  const absl::Time connect_deadline = absl::Now() + absl::Seconds(60);
  std::unique_ptr<Transport> transport;
  if (transport_name == "grpc") {
    std::vector<std::string> addresses = absl::StrSplit(addresses_flag, ',');
    if (static_cast<int>(addresses.size()) != size) {
      std::cerr << "--addresses must list " << size << " host:port" << std::endl;
      return 2;
    }
    GrpcTransport::Options options;
    options.group = group;
    auto t = GrpcTransport::Listen(rank, size, addresses[rank], options);
    if (!t.ok()) {
      std::cerr << t.status() << std::endl;
      return 1;
    }
    if (absl::Status s = (*t)->Connect(addresses, connect_deadline); !s.ok()) {
      std::cerr << s << std::endl;
      return 1;
    }
    transport = std::move(*t);
  } else {
    auto t = ShmTransport::Connect(group, rank, size, shm_options, connect_deadline);
    if (!t.ok()) {
      std::cerr << t.status() << std::endl;
      return 1;
    }
    transport = std::move(*t);
  }

  uint64_t op = 0;
  for (size_t bytes : sizes) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    // Touch the pages, warm the path, then line the ranks up.
    const absl::Time deadline = absl::Now() + absl::Minutes(5);
    for (int i = 0; i < 3; ++i) {
      if (absl::Status s = AllReduce(*transport, absl::MakeSpan(data), op++, deadline); !s.ok()) {
        std::cerr << s << std::endl;
        return 1;
      }
    }
    if (absl::Status s = Barrier(*transport, op++, deadline); !s.ok()) {
      std::cerr << s << std::endl;
      return 1;
    }
    const int iters = ItersFor(bytes);
    const absl::Time start = absl::Now();
    for (int i = 0; i < iters; ++i) {
      if (absl::Status s = AllReduce(*transport, absl::MakeSpan(data), op++, deadline); !s.ok()) {
        std::cerr << s << std::endl;
        return 1;
      }
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start) / iters;
    const double busbw = 2.0 * (size - 1) / size * bytes / seconds / 1e9;
    if (rank == 0) {
      std::printf("RESULT kubetrain-%s %zu %d %.2f %.3f\n", transport_name.c_str(), bytes, iters,
                  seconds * 1e6, busbw);
      std::fflush(stdout);
    }
  }
  return 0;
}
