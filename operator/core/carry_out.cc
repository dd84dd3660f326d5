#include "operator/core/carry_out.h"

#include <utility>

namespace kubetrain::core {

absl::Status CarryOut(const ReconcileResult& result, ResultSink& sink) {
  std::vector<v1::HyperparameterOutput> archived;
  std::vector<Deletion> deletions;
  std::vector<Creation> claims, creations;
  std::vector<EmitEvent> events;
  for (const Action& action : result.actions) {
    if (const auto* a = std::get_if<ArchiveTrial>(&action)) {
      archived.push_back(a->trial);
    } else if (const auto* d = std::get_if<DeleteReplica>(&action)) {
      deletions.emplace_back(*d);
    } else if (const auto* d = std::get_if<DeleteService>(&action)) {
      deletions.emplace_back(*d);
    } else if (const auto* d = std::get_if<DeleteClaim>(&action)) {
      deletions.emplace_back(*d);
    } else if (const auto* c = std::get_if<CreateClaim>(&action)) {
      claims.emplace_back(*c);
    } else if (const auto* c = std::get_if<CreateReplica>(&action)) {
      creations.emplace_back(*c);
    } else if (const auto* c = std::get_if<CreateService>(&action)) {
      creations.emplace_back(*c);
    } else if (const auto* e = std::get_if<EmitEvent>(&action)) {
      events.push_back(*e);
    }
  }
  claims.insert(claims.end(), std::make_move_iterator(creations.begin()),
                std::make_move_iterator(creations.end()));

  if (!archived.empty()) {
    if (absl::Status s = sink.Archive(archived); !s.ok()) return s;
  }
  if (result.status_changed) {
    if (absl::Status s = sink.WriteStatus(result.status); !s.ok()) return s;
  }
  absl::Status first_error;
  auto keep_first = [&first_error](absl::Status s) {
    if (first_error.ok()) first_error = std::move(s);
  };
  if (!deletions.empty()) keep_first(sink.Delete(deletions));
  if (!claims.empty()) keep_first(sink.Create(claims));
  if (!events.empty()) keep_first(sink.Emit(events));
  return first_error;
}

}  // namespace kubetrain::core
