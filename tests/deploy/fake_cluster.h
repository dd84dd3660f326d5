#pragma once

// The cluster an operator process under test talks to: a fake API server and
// a kubeconfig for it. Header-only, for the deploy tests.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/testing/temp_dir.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::deploy_testing {

struct FakeCluster {
  std::unique_ptr<fake_apiserver::FakeApiServer> server;
  // A fresh folder holding "kubeconfig" (--kubeconfig DIR/kubeconfig), with
  // room for the test's own files; removed with the FakeCluster.
  test_support::TempDir folder;
  std::string dir;  // folder.path()
};

// Starts the server with `options` and writes the kubeconfig (its bearer
// token `options.bearer_token`) into a new folder named after `name` under
// $TMPDIR.
inline absl::StatusOr<FakeCluster> StartFakeCluster(
    const fake_apiserver::FakeApiServer::Options& options, const std::string& name) {
  auto server = fake_apiserver::FakeApiServer::Start(options);
  if (!server.ok()) return server.status();
  test_support::TempDir folder(name);
  std::string dir = folder.path();
  fake_apiserver::WriteKubeconfig(dir, (*server)->url(), options.bearer_token);
  return FakeCluster{*std::move(server), std::move(folder), std::move(dir)};
}

}  // namespace kubetrain::deploy_testing
