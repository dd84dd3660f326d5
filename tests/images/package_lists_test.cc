// scripts/packages/ against what this build really uses, so the images'
// package lists and scripts/install-deps.sh cannot drift apart:
// - install-deps.sh installs every package of build.txt;
// - every file CMake found for this build (config packages, headers,
//   libraries, programs) belongs to a package of build.txt or to one they
//   depend on, because the images' build stage installs build.txt and nothing
//   else;
// - every shared library the built kubetrain-runtime loads belongs to a
//   package of runtime.txt, one they depend on, or Debian's minimal base
//   (Essential and Priority required, and apt); every one kubetrain-operator
//   loads, to one of runtime.txt or operator.txt (or their dependencies, or
//   the base), because the operator image copies its libraries from those.
// Files outside Debian's packages (the CUDA toolkit under /usr/local) are left
// out: the CUDA variant of the image mounts the toolkit instead.
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/deploy/manifest_checks.h"

#ifndef KUBETRAIN_BINARY_DIR
#error "KUBETRAIN_BINARY_DIR must name the build tree"
#endif
#ifndef KUBETRAIN_RUNTIME_BINARY
#error "KUBETRAIN_RUNTIME_BINARY must name the kubetrain-runtime binary"
#endif
#ifndef KUBETRAIN_OPERATOR_BINARY
#error "KUBETRAIN_OPERATOR_BINARY must name the kubetrain-operator binary"
#endif

namespace kubetrain::images_testing {
namespace {

using deploy_testing::CommandResult;
using deploy_testing::ReadFile;
using deploy_testing::RunCommand;
using deploy_testing::SourcePath;

// An installed package as dpkg knows it.
struct Package {
  std::vector<std::string> depends;  // Depends and Pre-Depends, first alternatives
  bool base = false;                 // Essential, or Priority required
};
using PackageDb = std::map<std::string, Package>;

// "libc6 (>= 2.34), libgcc-s1 | libgcc1, python3:any" -> libc6, libgcc-s1, python3
std::vector<std::string> FirstAlternatives(absl::string_view field) {
  std::vector<std::string> names;
  for (absl::string_view dep : absl::StrSplit(field, ',', absl::SkipWhitespace())) {
    absl::string_view first = absl::StripAsciiWhitespace(dep.substr(0, dep.find('|')));
    first = first.substr(0, first.find_first_of(" :("));
    if (!first.empty()) names.emplace_back(first);
  }
  return names;
}

PackageDb InstalledPackages() {
  CommandResult result = RunCommand(
      "dpkg-query -W -f='${db:Status-Abbrev}\\t${Package}\\t${Depends}\\t${Pre-Depends}\\t"
      "${Essential}\\t${Priority}\\n'");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  PackageDb db;
  for (absl::string_view line : absl::StrSplit(result.output, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() != 6 || !absl::StartsWith(f[0], "ii")) continue;
    Package& p = db[f[1]];
    for (const std::string& field : {f[2], f[3]}) {
      for (std::string& d : FirstAlternatives(field)) p.depends.push_back(std::move(d));
    }
    p.base = f[4] == "yes" || f[5] == "required";
  }
  return db;
}

// `roots` and everything they depend on, recursively.
std::set<std::string> Closure(const std::set<std::string>& roots, const PackageDb& db) {
  std::set<std::string> seen;
  std::vector<std::string> todo(roots.begin(), roots.end());
  while (!todo.empty()) {
    std::string name = todo.back();
    todo.pop_back();
    if (!seen.insert(name).second) continue;
    auto p = db.find(name);
    if (p == db.end()) continue;
    for (const std::string& d : p->second.depends) todo.push_back(d);
  }
  return seen;
}

// What a debootstrap --variant=minbase system holds.
std::set<std::string> BaseSystem(const PackageDb& db) {
  std::set<std::string> roots = {"apt"};
  for (const auto& [name, p] : db) {
    if (p.base) roots.insert(name);
  }
  return Closure(roots, db);
}

// The needed packages that neither `listed` nor what they depend on (nor
// `also_present`) brings in.
std::set<std::string> Missing(const std::set<std::string>& needed,
                              const std::set<std::string>& listed,
                              const std::set<std::string>& also_present, const PackageDb& db) {
  std::set<std::string> have = Closure(listed, db);
  have.insert(also_present.begin(), also_present.end());
  std::set<std::string> missing;
  for (const std::string& n : needed) {
    if (have.count(n) == 0) missing.insert(n);
  }
  return missing;
}

// The packages of a scripts/packages/ list.
std::set<std::string> ListFile(const std::string& name) {
  auto text = ReadFile(SourcePath("scripts/packages/" + name));
  EXPECT_TRUE(text.ok()) << text.status();
  std::set<std::string> packages;
  if (!text.ok()) return packages;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = line.substr(0, line.find('#'));
    for (absl::string_view word : absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      packages.emplace(word);
    }
  }
  EXPECT_FALSE(packages.empty()) << name;
  return packages;
}

// The same file under Debian 12's merged /usr: dpkg records most libraries
// under /lib, the file system resolves them under /usr/lib.
std::string OtherSpelling(const std::string& path) {
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"/usr/lib/", "/lib/"}, {"/usr/bin/", "/bin/"}, {"/usr/sbin/", "/sbin/"}}) {
    if (absl::StartsWith(path, a)) return b + path.substr(a.size());
    if (absl::StartsWith(path, b)) return a + path.substr(b.size());
  }
  return path;
}

// The one package that owns each path (as given, or its real path, in either
// spelling); paths no package owns, or that several own (shared directories
// such as /usr/include), are left out. One dpkg call for all of them.
std::map<std::string, std::string> Owners(const std::set<std::string>& paths) {
  std::map<std::string, std::vector<std::string>> candidates;
  std::string args;
  for (const std::string& path : paths) {
    CommandResult real = RunCommand("readlink -f '" + path + "'");
    const std::string resolved(absl::StripAsciiWhitespace(real.output));
    for (const std::string& c : {path, OtherSpelling(path), resolved, OtherSpelling(resolved)}) {
      candidates[path].push_back(c);
      absl::StrAppend(&args, " '", c, "'");
    }
  }
  // "pkg1:amd64, pkg2: /path" per path found; the rest are errors on stderr.
  std::map<std::string, std::string> owner_of_file;
  CommandResult result = RunCommand("dpkg -S" + args);
  for (absl::string_view line : absl::StrSplit(result.output, '\n', absl::SkipEmpty())) {
    size_t colon_space = line.find(": /");
    if (colon_space == absl::string_view::npos) continue;
    absl::string_view packages = line.substr(0, colon_space);
    if (absl::StrContains(packages, ',') || absl::StrContains(packages, ' ')) continue;
    owner_of_file[std::string(line.substr(colon_space + 2))] =
        std::string(packages.substr(0, packages.find(':')));
  }
  std::map<std::string, std::string> owner;
  for (const auto& [path, files] : candidates) {
    for (const std::string& f : files) {
      auto it = owner_of_file.find(f);
      if (it != owner_of_file.end()) {
        owner[path] = it->second;
        break;
      }
    }
  }
  return owner;
}

std::string Describe(const std::set<std::string>& missing,
                     const std::map<std::string, std::string>& owners) {
  std::ostringstream out;
  for (const std::string& m : missing) {
    out << "  " << m << " (for";
    for (const auto& [path, package] : owners) {
      if (package == m) out << " " << path;
    }
    out << ")\n";
  }
  return out.str();
}

TEST(PackageListsTest, ClosureFollowsDependsAndFindsWhatIsMissing) {
  PackageDb db = {{"libfoo-dev", {{"libfoo1", "libbar1"}, false}},
                  {"libfoo1", {{"libc6"}, false}},
                  {"libbar1", {{}, false}},
                  {"libc6", {{}, true}},
                  {"libbaz1", {{}, false}}};
  EXPECT_TRUE(Missing({"libbar1"}, {"libfoo-dev"}, {}, db).empty());
  EXPECT_EQ(Missing({"libbar1", "libbaz1"}, {"libfoo1"}, {}, db),
            (std::set<std::string>{"libbar1", "libbaz1"}));
  EXPECT_TRUE(Missing({"libc6"}, {}, BaseSystem(db), db).empty());
  EXPECT_EQ(FirstAlternatives("libc6 (>= 2.34), libgcc-s1 | libgcc1, python3:any"),
            (std::vector<std::string>{"libc6", "libgcc-s1", "python3"}));
}

TEST(PackageListsTest, InstallDepsInstallsTheBuildList) {
  CommandResult listed = RunCommand(SourcePath("scripts/install-deps.sh") + " --list");
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  std::set<std::string> installed;
  for (absl::string_view line : absl::StrSplit(listed.output, '\n', absl::SkipEmpty())) {
    installed.emplace(line);
  }
  for (const std::string& p : ListFile("build.txt")) {
    EXPECT_EQ(installed.count(p), 1u) << p << " is in scripts/packages/build.txt but "
                                      << "scripts/install-deps.sh does not install it";
  }
}

TEST(PackageListsTest, BuildListHasWhatCMakeFound) {
  auto cache = ReadFile(std::string(KUBETRAIN_BINARY_DIR) + "/CMakeCache.txt");
  ASSERT_TRUE(cache.ok()) << cache.status();
  // NAME:PATH=/usr/... and NAME:FILEPATH=/usr/... entries: what find_package,
  // find_library, find_path and find_program chose.
  std::set<std::string> paths;
  for (absl::string_view line : absl::StrSplit(*cache, '\n')) {
    if (absl::StartsWith(line, "//") || absl::StartsWith(line, "#")) continue;
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    absl::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
    if (!absl::EndsWith(key, ":PATH") && !absl::EndsWith(key, ":FILEPATH")) continue;
    if (!absl::StartsWith(value, "/usr/") || absl::StartsWith(value, "/usr/local/")) continue;
    if (absl::StartsWith(key, "CMAKE_INSTALL_")) continue;
    // Google Benchmark is found only for bench/ (KUBETRAIN_BENCH), which the
    // images build without; install-deps.sh installs it for the tests.
    if (absl::StartsWith(key, "benchmark_")) continue;
    paths.emplace(value);
  }
  std::map<std::string, std::string> owners = Owners(paths);
  ASSERT_GT(owners.size(), 10u) << "too few of CMake's choices resolved to packages";
  std::set<std::string> needed;
  for (const auto& [path, package] : owners) needed.insert(package);
  PackageDb db = InstalledPackages();
  std::set<std::string> missing = Missing(needed, ListFile("build.txt"), {}, db);
  EXPECT_TRUE(missing.empty())
      << "the build uses packages that scripts/packages/build.txt does not bring in "
         "(add them there; the images' build stage installs only that list):\n"
      << Describe(missing, owners);
}

// The packages whose libraries `binary` loads, and which library each is for.
std::map<std::string, std::string> LoadedLibraryOwners(const std::string& binary) {
  CommandResult ldd = RunCommand("ldd " + binary);
  EXPECT_EQ(ldd.exit_code, 0) << ldd.output;
  // "\tlibfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"
  std::set<std::string> libraries;
  for (absl::string_view line : absl::StrSplit(ldd.output, '\n', absl::SkipEmpty())) {
    size_t arrow = line.find("=> /");
    if (arrow == absl::string_view::npos) continue;
    absl::string_view path = line.substr(arrow + 3);
    libraries.emplace(path.substr(0, path.find(' ')));
  }
  EXPECT_GT(libraries.size(), 5u) << ldd.output;
  return Owners(libraries);
}

TEST(PackageListsTest, RuntimeListHasWhatTheRuntimeLoads) {
  std::map<std::string, std::string> owners = LoadedLibraryOwners(KUBETRAIN_RUNTIME_BINARY);
  std::set<std::string> needed;
  for (const auto& [path, package] : owners) needed.insert(package);
  EXPECT_TRUE(needed.count("libgrpc++1.51")) << Describe(needed, owners);
  PackageDb db = InstalledPackages();
  std::set<std::string> missing = Missing(needed, ListFile("runtime.txt"), BaseSystem(db), db);
  EXPECT_TRUE(missing.empty())
      << "kubetrain-runtime loads libraries of packages that the runtime image does not "
         "install (add them to scripts/packages/runtime.txt):\n"
      << Describe(missing, owners);
}

TEST(PackageListsTest, OperatorListsHaveWhatTheOperatorLoads) {
  std::map<std::string, std::string> owners = LoadedLibraryOwners(KUBETRAIN_OPERATOR_BINARY);
  std::set<std::string> needed;
  for (const auto& [path, package] : owners) needed.insert(package);
  EXPECT_TRUE(needed.count("libcpprest2.10")) << Describe(needed, owners);
  std::set<std::string> listed = ListFile("runtime.txt");
  for (const std::string& p : ListFile("operator.txt")) listed.insert(p);
  PackageDb db = InstalledPackages();
  std::set<std::string> missing = Missing(needed, listed, BaseSystem(db), db);
  EXPECT_TRUE(missing.empty())
      << "kubetrain-operator loads libraries of packages that the operator image does not "
         "take its libraries from (add them to scripts/packages/operator.txt):\n"
      << Describe(missing, owners);
}

}  // namespace
}  // namespace kubetrain::images_testing
