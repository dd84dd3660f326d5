#pragma once

// The cluster an operator process under test talks to: a fake API server and
// a kubeconfig for it. Header-only, for the deploy tests.

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::deploy_testing {

struct FakeCluster {
  std::unique_ptr<fake_apiserver::FakeApiServer> server;
  // A fresh folder holding "kubeconfig" (--kubeconfig DIR/kubeconfig), with
  // room for the test's own files.
  std::string dir;
};

// Starts the server with `options` and writes the kubeconfig (its bearer
// token `options.bearer_token`) into a new folder named after `name` under
// the test's temporary directory.
inline absl::StatusOr<FakeCluster> StartFakeCluster(
    const fake_apiserver::FakeApiServer::Options& options, const std::string& name) {
  auto server = fake_apiserver::FakeApiServer::Start(options);
  if (!server.ok()) return server.status();
  std::string dir = ::testing::TempDir() + "/" + name + "_XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", dir, ": ", std::strerror(errno)));
  }
  fake_apiserver::WriteKubeconfig(dir, (*server)->url(), options.bearer_token);
  return FakeCluster{*std::move(server), dir};
}

}  // namespace kubetrain::deploy_testing
