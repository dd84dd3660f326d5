// libFuzzer target: any bytes as a kubeconfig. The parser must return a
// status, never crash or throw; files it names are answered from memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "operator/kube/kubeconfig.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto reader = [](const std::string& path) -> absl::StatusOr<std::string> {
    if (path.size() % 2 == 0) return absl::NotFoundError(path);
    return std::string("-----BEGIN CERTIFICATE-----\n") + path;
  };
  auto config = kubetrain::kube::ParseKubeconfig(text, "/base", reader);
  if (config.ok()) (void)config->server.size();
  auto other = kubetrain::kube::ParseKubeconfig(text, "", reader, "ctx");
  (void)other.ok();
  return 0;
}
