#include "operator/core/carry_out.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::core {
namespace {

using testing::ElementsAre;
using testing::IsEmpty;

// Writes down every step it is given, as "step:what,what"; the steps named
// in `failing` fail.
class RecordingSink : public ResultSink {
 public:
  std::vector<std::string> calls;
  std::vector<std::string> failing;

  absl::Status Archive(const std::vector<v1::HyperparameterOutput>& trials) override {
    std::vector<std::string> ids;
    for (const auto& t : trials) ids.push_back(t.trial_id());
    return Step("archive", ids);
  }
  absl::Status WriteStatus(const v1::TrainingJobStatus& status) override {
    return Step("status", {v1::State_Name(status.state())});
  }
  absl::Status Delete(const std::vector<Deletion>& deletions) override {
    std::vector<std::string> names;
    for (const Deletion& d : deletions) {
      if (const auto* r = std::get_if<DeleteReplica>(&d)) names.push_back("pod/" + r->name);
      if (const auto* s = std::get_if<DeleteService>(&d)) names.push_back("service/" + s->name);
      if (const auto* c = std::get_if<DeleteClaim>(&d)) names.push_back("claim/" + c->name);
    }
    return Step("delete", names);
  }
  absl::Status Create(const std::vector<Creation>& creations) override {
    std::vector<std::string> names;
    for (const Creation& c : creations) {
      if (const auto* r = std::get_if<CreateReplica>(&c)) names.push_back("pod/" + r->replica.name);
      if (const auto* s = std::get_if<CreateService>(&c)) {
        names.push_back("service/" + s->replica.name);
      }
      if (const auto* k = std::get_if<CreateClaim>(&c)) names.push_back("claim/" + k->name);
    }
    return Step("create", names);
  }
  absl::Status Emit(const std::vector<EmitEvent>& events) override {
    std::vector<std::string> reasons;
    for (const EmitEvent& e : events) reasons.push_back(e.reason);
    return Step("emit", reasons);
  }

 private:
  absl::Status Step(const std::string& step, const std::vector<std::string>& what) {
    calls.push_back(absl::StrCat(step, ":", absl::StrJoin(what, ",")));
    for (const std::string& f : failing) {
      if (f == step) return absl::UnavailableError(absl::StrCat(step, " failed"));
    }
    return absl::OkStatus();
  }
};

DesiredReplica Replica(const std::string& name) {
  DesiredReplica r;
  r.name = name;
  return r;
}

v1::HyperparameterOutput Trial(const std::string& id) {
  v1::HyperparameterOutput t;
  t.set_trial_id(id);
  return t;
}

// Every kind of action, in an order unlike the one they are carried out in.
ReconcileResult EveryKind() {
  ReconcileResult result;
  result.actions.push_back(EmitEvent{EmitEvent::Type::kNormal, "TrialStarted", "trial 3"});
  result.actions.push_back(CreateReplica{Replica("j-t3-master-0")});
  result.actions.push_back(CreateService{Replica("j-t3-master-0")});
  result.actions.push_back(DeleteReplica{"j-t1-ps-0", false, "trial 1 ended"});
  result.actions.push_back(ArchiveTrial{Trial("1")});
  result.actions.push_back(CreateClaim{"j-output"});
  result.actions.push_back(DeleteService{"j-t1-ps-0"});
  result.actions.push_back(EmitEvent{EmitEvent::Type::kNormal, "TrialArchived", "trial 1"});
  result.actions.push_back(ArchiveTrial{Trial("2")});
  result.actions.push_back(DeleteClaim{"old-output"});
  result.status.set_state(v1::RUNNING);
  result.status_changed = true;
  return result;
}

TEST(CarryOutTest, ArchiveThenStatusThenDeletesThenCreatesClaimsFirstThenEvents) {
  RecordingSink sink;
  ASSERT_TRUE(CarryOut(EveryKind(), sink).ok());
  EXPECT_THAT(sink.calls,
              ElementsAre("archive:1,2", "status:RUNNING",
                          "delete:pod/j-t1-ps-0,service/j-t1-ps-0,claim/old-output",
                          "create:claim/j-output,pod/j-t3-master-0,service/j-t3-master-0",
                          "emit:TrialStarted,TrialArchived"));
}

TEST(CarryOutTest, AStepWithNothingToDoIsNotCalled) {
  RecordingSink sink;
  ASSERT_TRUE(CarryOut(ReconcileResult{}, sink).ok());
  EXPECT_THAT(sink.calls, IsEmpty());

  ReconcileResult unchanged = EveryKind();
  unchanged.status_changed = false;
  ASSERT_TRUE(CarryOut(unchanged, sink).ok());
  EXPECT_THAT(sink.calls,
              ElementsAre("archive:1,2", "delete:pod/j-t1-ps-0,service/j-t1-ps-0,claim/old-output",
                          "create:claim/j-output,pod/j-t3-master-0,"
                          "service/j-t3-master-0",
                          "emit:TrialStarted,TrialArchived"));
}

// Trials must be stored before the status drops them, and a new trial's
// status written before its replicas exist: either failing ends it there.
TEST(CarryOutTest, AFailedArchiveOrStatusWriteEndsItThere) {
  RecordingSink archive_fails;
  archive_fails.failing = {"archive"};
  absl::Status s = CarryOut(EveryKind(), archive_fails);
  EXPECT_EQ(s.message(), "archive failed");
  EXPECT_THAT(archive_fails.calls, ElementsAre("archive:1,2"));

  RecordingSink status_fails;
  status_fails.failing = {"status"};
  s = CarryOut(EveryKind(), status_fails);
  EXPECT_EQ(s.message(), "status failed");
  EXPECT_THAT(status_fails.calls, ElementsAre("archive:1,2", "status:RUNNING"));
}

// Once the status is written its events are told, whatever failed after it;
// the first failure comes back.
TEST(CarryOutTest, AfterTheStatusEveryStepIsAttemptedAndTheFirstFailureReturned) {
  RecordingSink sink;
  sink.failing = {"delete", "create"};
  absl::Status s = CarryOut(EveryKind(), sink);
  EXPECT_EQ(s.message(), "delete failed");
  ASSERT_EQ(sink.calls.size(), 5u);
  EXPECT_EQ(sink.calls[4], "emit:TrialStarted,TrialArchived");

  RecordingSink emit_fails;
  emit_fails.failing = {"emit"};
  EXPECT_EQ(CarryOut(EveryKind(), emit_fails).message(), "emit failed");
}

}  // namespace
}  // namespace kubetrain::core
