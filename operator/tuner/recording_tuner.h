#pragma once

// Test helper: a Tuner that passes every call to another and keeps the
// history of the last Suggest call, so a backend test can check what the
// tuner was shown (for example the trials of a resumed study).

#include <memory>
#include <utility>
#include <vector>

#include "operator/tuner/tuner.h"

namespace kubetrain::tuner {

class RecordingTuner : public Tuner {
 public:
  // `last` must outlive this tuner; it is overwritten on each Suggest.
  RecordingTuner(std::unique_ptr<Tuner> inner, std::vector<TrialRecord>* last)
      : inner_(std::move(inner)), last_(last) {}

  std::vector<Assignment> Suggest(const std::vector<TrialRecord>& history, int count) override {
    *last_ = history;
    return inner_->Suggest(history, count);
  }

 private:
  std::unique_ptr<Tuner> inner_;
  std::vector<TrialRecord>* last_;
};

}  // namespace kubetrain::tuner
