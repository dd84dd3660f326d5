#include "operator/core/output_storage.h"

#include "absl/strings/str_cat.h"
#include "api/output_storage.h"
#include "operator/core/naming.h"

namespace kubetrain::core {

std::optional<OutputMount> OutputMountOf(const v1::TrainingJob& job) {
  if (!job.spec().has_output_storage()) return std::nullopt;
  const v1::OutputStorage& storage = job.spec().output_storage();
  OutputMount mount;
  mount.mount_path = job.spec().training_input().job_dir();
  mount.sub_path = storage.sub_path();
  if (!storage.volume_name().empty()) {
    mount.volume_name = storage.volume_name();
  } else {
    mount.volume_name = kOutputVolumeName;
    mount.claim_name =
        storage.has_new_claim() ? OutputClaimName(JobObjectName(job)) : storage.claim_name();
  }
  return mount;
}

std::string NewOutputClaimName(const v1::TrainingJob& job) {
  if (!job.spec().output_storage().has_new_claim()) return "";
  return OutputClaimName(JobObjectName(job));
}

v1::OutputLocation OutputLocationOf(const v1::TrainingJob& job, bool own_filesystems) {
  v1::OutputLocation location;
  location.set_path(api::OutputFolder(job.spec().training_input()));
  if (!own_filesystems || location.path().empty()) return location;
  if (std::optional<OutputMount> mount = OutputMountOf(job)) {
    location.set_claim_name(mount->claim_name);
    location.set_volume_name(mount->volume_name == kOutputVolumeName ? "" : mount->volume_name);
    location.set_sub_path(mount->sub_path);
    return location;
  }
  std::optional<api::TemplateMount> mount = api::TemplateMountFor(job.spec(), location.path());
  if (!mount) {
    location.set_ephemeral(true);  // a relative path, too: in the container's working folder
    return location;
  }
  location.set_volume_name(mount->volume_name);
  location.set_sub_path(mount->sub_path);
  location.set_ephemeral(mount->empty_dir);
  return location;
}

std::string TrialOutputPath(const v1::OutputLocation& location, const std::string& trial_id) {
  const std::string& path = location.path();
  if (path.empty()) return "";
  return path.back() == '/' ? path + trial_id : absl::StrCat(path, "/", trial_id);
}

std::string EphemeralOutputsMessage(const v1::OutputLocation& location) {
  const std::string where =
      location.volume_name().empty()
          ? absl::StrCat("the output folder ", location.path(),
                         " is inside each replica's container")
          : absl::StrCat("the output folder ", location.path(), " is on volume \"",
                         location.volume_name(), "\", an emptyDir of each pod");
  return absl::StrCat(where,
                      ": checkpoints, summaries and the exported model go with the pods, a "
                      "recreated replica starts again from step 0, and no other replica reads "
                      "them. Name a claim in spec.outputStorage (claimName, or newClaim to have "
                      "one created) to keep them");
}

}  // namespace kubetrain::core
