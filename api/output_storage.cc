#include "api/output_storage.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace kubetrain::api {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

const Value* Member(const Struct& object, const std::string& key) {
  auto it = object.fields().find(key);
  return it == object.fields().end() ? nullptr : &it->second;
}

std::string StringMember(const Struct& object, const std::string& key) {
  const Value* value = Member(object, key);
  return value != nullptr && value->has_string_value() ? value->string_value() : "";
}

// The list `key` of `object`, or nullptr.
const google::protobuf::ListValue* ListMember(const Struct& object, const std::string& key) {
  const Value* value = Member(object, key);
  return value != nullptr && value->has_list_value() ? &value->list_value() : nullptr;
}

// spec.template.spec, or nullptr.
const Struct* TemplatePodSpec(const v1::TrainingJobSpec& spec) {
  if (!spec.has_template_()) return nullptr;
  const Value* pod_spec = Member(spec.template_(), "spec");
  return pod_spec != nullptr && pod_spec->has_struct_value() ? &pod_spec->struct_value() : nullptr;
}

// The entry of spec.template.spec.volumes named `name`, or nullptr.
const Struct* TemplateVolume(const v1::TrainingJobSpec& spec, const std::string& name) {
  const Struct* pod_spec = TemplatePodSpec(spec);
  const google::protobuf::ListValue* volumes =
      pod_spec == nullptr ? nullptr : ListMember(*pod_spec, "volumes");
  if (volumes == nullptr) return nullptr;
  for (const Value& volume : volumes->values()) {
    if (volume.has_struct_value() && StringMember(volume.struct_value(), "name") == name) {
      return &volume.struct_value();
    }
  }
  return nullptr;
}

// "/a/b/" -> "/a/b"; "/" stays.
absl::string_view WithoutTrailingSlash(absl::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  return path;
}

bool Holds(absl::string_view mount_path, absl::string_view folder) {
  mount_path = WithoutTrailingSlash(mount_path);
  folder = WithoutTrailingSlash(folder);
  if (mount_path == "/" || mount_path == folder) return true;
  return absl::StartsWith(folder, mount_path) && folder[mount_path.size()] == '/';
}

// A DNS-1123 subdomain, what Kubernetes needs of claim and StorageClass
// names: at most 253 lowercase letters, digits, '-' and '.', starting and
// ending with a letter or digit.
std::string SubdomainProblem(absl::string_view name) {
  if (name.size() > 253) return absl::StrCat("at most 253 characters, got ", name.size());
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && c != '.') {
      return absl::StrCat("must hold only lowercase letters, digits, '-' and '.' (a Kubernetes ",
                          "name), got \"", name, "\"");
    }
  }
  if (!absl::ascii_isalnum(name.front()) || !absl::ascii_isalnum(name.back())) {
    return absl::StrCat("must start and end with a letter or digit, got \"", name, "\"");
  }
  return "";
}

// A positive Kubernetes quantity in its plain forms: digits, an optional
// fraction and a binary (Ki..Ei) or decimal (k..E) suffix.
bool IsPositiveQuantity(absl::string_view size) {
  size_t digits_end = 0;
  bool nonzero = false, point = false;
  for (; digits_end < size.size(); ++digits_end) {
    const char c = size[digits_end];
    if (c == '.' && !point && digits_end > 0) {
      point = true;
    } else if (absl::ascii_isdigit(c)) {
      nonzero = nonzero || c != '0';
    } else {
      break;
    }
  }
  if (digits_end == 0 || size[digits_end - 1] == '.' || !nonzero) return false;
  const absl::string_view suffix = size.substr(digits_end);
  for (absl::string_view known :
       {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E"}) {
    if (suffix == known) return true;
  }
  return false;
}

}  // namespace

std::optional<TemplateMount> TemplateMountFor(const v1::TrainingJobSpec& spec,
                                              const std::string& folder) {
  if (folder.empty() || folder[0] != '/') return std::nullopt;
  const Struct* pod_spec = TemplatePodSpec(spec);
  const google::protobuf::ListValue* containers =
      pod_spec == nullptr ? nullptr : ListMember(*pod_spec, "containers");
  if (containers == nullptr) return std::nullopt;
  std::optional<TemplateMount> deepest;
  for (const Value& container : containers->values()) {
    if (!container.has_struct_value()) continue;
    // The training container: named "kubetrain", or unnamed (kube_objects.h).
    if (const Value* name = Member(container.struct_value(), "name");
        name != nullptr && !(name->has_string_value() && name->string_value() == "kubetrain")) {
      continue;
    }
    const google::protobuf::ListValue* mounts =
        ListMember(container.struct_value(), "volumeMounts");
    if (mounts == nullptr) continue;
    for (const Value& mount : mounts->values()) {
      if (!mount.has_struct_value()) continue;
      TemplateMount found;
      found.volume_name = StringMember(mount.struct_value(), "name");
      found.mount_path = StringMember(mount.struct_value(), "mountPath");
      found.sub_path = StringMember(mount.struct_value(), "subPath");
      if (found.volume_name.empty() || found.mount_path.empty() || found.mount_path[0] != '/' ||
          !Holds(found.mount_path, folder)) {
        continue;
      }
      if (deepest && WithoutTrailingSlash(deepest->mount_path).size() >=
                         WithoutTrailingSlash(found.mount_path).size()) {
        continue;
      }
      if (const Struct* volume = TemplateVolume(spec, found.volume_name)) {
        found.volume_found = true;
        found.empty_dir = Member(*volume, "emptyDir") != nullptr;
      }
      deepest = std::move(found);
    }
  }
  return deepest;
}

std::string OutputFolder(const v1::TrainingInput& input) {
  if (!input.job_dir().empty()) return input.job_dir();
  std::string folder;
  const auto& args = input.args();
  for (int i = 0; i < args.size(); ++i) {
    for (absl::string_view flag : {"--output_path", "--job-dir", "--job_dir"}) {
      if (args[i] == flag && i + 1 < args.size()) {
        folder = args[i + 1];
      } else if (absl::StartsWith(args[i], absl::StrCat(flag, "="))) {
        folder = args[i].substr(flag.size() + 1);
      }
    }
  }
  return folder;
}

void ValidateOutputStorage(const v1::TrainingJobSpec& spec, std::vector<FieldError>* errors) {
  if (!spec.has_output_storage()) return;
  auto error = [errors](std::string path, std::string reason) {
    errors->push_back({std::move(path), std::move(reason)});
  };
  const v1::OutputStorage& storage = spec.output_storage();
  const std::string path = "spec.outputStorage";
  const int kinds = static_cast<int>(!storage.claim_name().empty()) +
                    static_cast<int>(!storage.volume_name().empty()) +
                    static_cast<int>(storage.has_new_claim());
  if (kinds != 1) {
    error(path, kinds == 0 ? "set one of claimName, volumeName and newClaim"
                           : "set only one of claimName, volumeName and newClaim");
  }

  const std::string& job_dir = spec.training_input().job_dir();
  const std::string job_dir_path = "spec.trainingInput.jobDir";
  if (job_dir.empty()) {
    error(job_dir_path, "required with spec.outputStorage: the folder the storage is mounted at");
  } else if (job_dir[0] != '/') {
    error(job_dir_path,
          absl::StrCat("must be an absolute path with spec.outputStorage (the storage is mounted "
                       "there), got \"",
                       job_dir, "\""));
  } else if (WithoutTrailingSlash(job_dir) == "/") {
    error(job_dir_path, "must not be \"/\" with spec.outputStorage: the storage is mounted there");
  } else if (std::optional<TemplateMount> mount = TemplateMountFor(spec, job_dir);
             mount && WithoutTrailingSlash(mount->mount_path) == WithoutTrailingSlash(job_dir)) {
    error(path, absl::StrCat("spec.template already mounts volume \"", mount->volume_name,
                             "\" at jobDir (", job_dir,
                             "): remove that mount, or remove spec.outputStorage"));
  }

  if (!storage.claim_name().empty()) {
    if (std::string problem = SubdomainProblem(storage.claim_name()); !problem.empty()) {
      error(path + ".claimName", problem);
    }
  }
  if (!storage.volume_name().empty()) {
    const Struct* volume = TemplateVolume(spec, storage.volume_name());
    if (volume == nullptr) {
      error(path + ".volumeName", absl::StrCat("no volume \"", storage.volume_name(),
                                               "\" in spec.template.spec.volumes"));
    } else if (Member(*volume, "emptyDir") != nullptr) {
      error(path + ".volumeName",
            absl::StrCat("volume \"", storage.volume_name(),
                         "\" is an emptyDir, which goes with its pod: name a claim, NFS or "
                         "other volume every replica shares"));
    }
  }
  if (storage.has_new_claim()) {
    const v1::NewOutputClaim& claim = storage.new_claim();
    if (claim.size().empty()) {
      error(path + ".newClaim.size", "required: the claim's size, e.g. \"10Gi\"");
    } else if (!IsPositiveQuantity(claim.size())) {
      error(path + ".newClaim.size",
            absl::StrCat("must be a positive quantity such as \"10Gi\" or \"500Mi\", got \"",
                         claim.size(), "\""));
    }
    if (claim.has_storage_class_name() && !claim.storage_class_name().empty()) {
      if (std::string problem = SubdomainProblem(claim.storage_class_name()); !problem.empty()) {
        error(path + ".newClaim.storageClassName", problem);
      }
    }
  }
  if (const std::string& sub_path = storage.sub_path(); !sub_path.empty()) {
    bool escapes = sub_path[0] == '/';
    for (absl::string_view part : absl::StrSplit(sub_path, '/')) escapes = escapes || part == "..";
    if (escapes) {
      error(path + ".subPath",
            absl::StrCat("must be a relative path inside the volume, without \"..\", got \"",
                         sub_path, "\""));
    }
  }
}

}  // namespace kubetrain::api
