#include "operator/kube/kubeconfig.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kubetrain::kube {
namespace {

class FakeFiles {
 public:
  std::map<std::string, std::string> files;
  FileReader reader() {
    return [this](const std::string& path) -> absl::StatusOr<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return absl::NotFoundError(path + ": no such file");
      return it->second;
    };
  }
};

constexpr char kTwoContexts[] = R"(
apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod-cluster
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: CA_DATA
- name: dev-cluster
  cluster:
    server: https://dev.example:443
    certificate-authority: certs/ca.pem
    insecure-skip-tls-verify: true
contexts:
- name: prod
  context: {cluster: prod-cluster, user: robot, namespace: training}
- name: dev
  context: {cluster: dev-cluster, user: alice}
users:
- name: robot
  user:
    token: abc.def
- name: alice
  user:
    client-certificate: /etc/alice.crt
    client-key-data: KEY_DATA
)";

std::string WithData(std::string text) {
  auto replace = [&](const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
  };
  replace("CA_DATA", absl::Base64Escape("CA PEM"));
  replace("KEY_DATA", absl::Base64Escape("KEY PEM"));
  return text;
}

TEST(KubeconfigTest, CurrentContextWithTokenAndInlineCa) {
  FakeFiles fs;
  auto config = ParseKubeconfig(WithData(kTwoContexts), "/home/u/.kube", fs.reader());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "CA PEM");
  EXPECT_EQ(config->bearer_token, "abc.def");
  EXPECT_EQ(config->namespace_name, "training");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST(KubeconfigTest, NamedContextWithFilesAndClientCertificate) {
  FakeFiles fs;
  fs.files["/home/u/.kube/certs/ca.pem"] = "DEV CA";
  fs.files["/etc/alice.crt"] = "ALICE CERT";
  auto config = ParseKubeconfig(WithData(kTwoContexts), "/home/u/.kube", fs.reader(), "dev");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://dev.example:443");
  EXPECT_EQ(config->ca_pem, "DEV CA");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->client_certificate_pem, "ALICE CERT");
  EXPECT_EQ(config->client_key_pem, "KEY PEM");
  EXPECT_EQ(config->namespace_name, "default");
  EXPECT_TRUE(config->bearer_token.empty());
}

TEST(KubeconfigTest, ErrorsNameTheField) {
  FakeFiles fs;
  auto missing_file = ParseKubeconfig(WithData(kTwoContexts), "/x", fs.reader(), "dev");
  ASSERT_FALSE(missing_file.ok());
  EXPECT_NE(
      missing_file.status().message().find("clusters[dev-cluster].cluster.certificate-authority"),
      std::string::npos)
      << missing_file.status();

  auto no_context = ParseKubeconfig(WithData(kTwoContexts), "/x", fs.reader(), "staging");
  ASSERT_FALSE(no_context.ok());
  EXPECT_NE(no_context.status().message().find("contexts[staging]"), std::string::npos);

  auto bad_base64 = ParseKubeconfig(R"(
current-context: c
contexts: [{name: c, context: {cluster: k}}]
clusters: [{name: k, cluster: {server: "https://a", certificate-authority-data: "%%%"}}]
)",
                                    "", fs.reader());
  ASSERT_FALSE(bad_base64.ok());
  EXPECT_NE(bad_base64.status().message().find("certificate-authority-data: not valid base64"),
            std::string::npos)
      << bad_base64.status();

  auto exec = ParseKubeconfig(R"(
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://a"}}]
users: [{name: u, user: {exec: {command: aws}}}]
)",
                              "", fs.reader());
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kUnimplemented);

  auto syntax = ParseKubeconfig("clusters: [", "", fs.reader());
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("line"), std::string::npos);

  EXPECT_FALSE(ParseKubeconfig("just a string", "", fs.reader()).ok());
  EXPECT_FALSE(ParseKubeconfig("", "", fs.reader()).ok());
  EXPECT_FALSE(ParseKubeconfig("current-context: [1]", "", fs.reader()).ok());
}

TEST(KubeconfigTest, InClusterReadsServiceAccount) {
  FakeFiles unused;
  std::string dir = ::testing::TempDir() + "/sa";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  auto write = [&](const std::string& name, const std::string& text) {
    FILE* f = fopen((dir + "/" + name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(text.c_str(), f);
    fclose(f);
  };
  write("token", "sa-token\n");
  write("ca.crt", "CLUSTER CA");
  write("namespace", "kubetrain-system\n");
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  auto getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto config = LoadInCluster(dir, getenv);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->bearer_token, "sa-token");
  EXPECT_EQ(config->ca_pem, "CLUSTER CA");
  EXPECT_EQ(config->namespace_name, "kubetrain-system");

  env.clear();
  EXPECT_EQ(LoadInCluster(dir, getenv).status().code(), absl::StatusCode::kFailedPrecondition);
}

// $KUBECONFIG as kubectl reads it: several files merged, the first to set a
// value deciding it, relative paths resolved per file, missing files skipped.
TEST(KubeconfigTest, SeveralFilesMergeAsKubectlMergesThem) {
  const std::string dir = ::testing::TempDir() + "/kubeconfig-merge";
  std::filesystem::create_directories(dir + "/a/certs");
  std::filesystem::create_directories(dir + "/b");
  auto write = [&](const std::string& path, const std::string& text) {
    std::ofstream(dir + "/" + path) << text;
  };
  write("a/certs/ca.pem", "CA OF A");
  write("a/config", R"(
current-context: dev
clusters:
- name: dev-cluster
  cluster: {server: "https://dev.example:443", certificate-authority: certs/ca.pem}
contexts:
- name: dev
  context: {cluster: dev-cluster, user: alice, namespace: team-a}
users:
- name: alice
  user: {token: from-a}
)");
  write("b/config", R"(
current-context: prod
clusters:
- name: prod-cluster
  cluster: {server: "https://prod.example:6443"}
- name: dev-cluster
  cluster: {server: "https://shadowed.example:1"}
contexts:
- name: prod
  context: {cluster: prod-cluster, user: robot}
users:
- name: robot
  user: {tokenFile: token}
- name: alice
  user: {token: from-b}
)");
  write("b/token", "robot-token\n");
  const std::vector<std::string> paths = {dir + "/missing", dir + "/a/config", dir + "/b/config"};

  auto current = LoadKubeconfigFiles(paths);
  ASSERT_TRUE(current.ok()) << current.status();
  EXPECT_EQ(current->context_name, "dev");  // a's current-context: the first that sets it
  EXPECT_EQ(current->server, "https://dev.example:443");  // a's cluster, not b's of the same name
  EXPECT_EQ(current->ca_pem, "CA OF A");                  // resolved against a/
  EXPECT_EQ(current->bearer_token, "from-a");
  EXPECT_EQ(current->namespace_name, "team-a");

  auto prod = LoadKubeconfigFiles(paths, "prod");  // --context: an entry of b
  ASSERT_TRUE(prod.ok()) << prod.status();
  EXPECT_EQ(prod->context_name, "prod");
  EXPECT_EQ(prod->server, "https://prod.example:6443");
  EXPECT_EQ(prod->bearer_token, "robot-token");  // tokenFile resolved against b/
  EXPECT_EQ(prod->namespace_name, "default");

  auto unknown = LoadKubeconfigFiles(paths, "staging");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("contexts[staging]: no such entry"), std::string::npos)
      << unknown.status();
  EXPECT_EQ(LoadKubeconfigFiles({dir + "/missing", dir + "/gone"}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(KubeconfigTest, PathsFollowKubectl) {
  EXPECT_EQ(KubeconfigPaths("/a:/b::/c", "/home/u"), (std::vector<std::string>{"/a", "/b", "/c"}));
  EXPECT_EQ(KubeconfigPaths("", "/home/u"), std::vector<std::string>{"/home/u/.kube/config"});
  EXPECT_TRUE(KubeconfigPaths("", "").empty());
}

}  // namespace
}  // namespace kubetrain::kube
