#include "operator/tuner/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "operator/tuner/box_minimizer.h"
#include "operator/tuner/history.h"

namespace kubetrain::tuner {
namespace {

std::vector<int> FirstPrimes(int n) {
  std::vector<int> primes;
  for (int c = 2; static_cast<int>(primes.size()) < n; ++c) {
    bool prime = true;
    for (int p : primes) {
      if (p * p > c) break;
      if (c % p == 0) {
        prime = false;
        break;
      }
    }
    if (prime) primes.push_back(c);
  }
  return primes;
}

double RadicalInverse(uint64_t index, int base) {
  double result = 0, f = 1.0 / base;
  while (index > 0) {
    result += f * static_cast<double>(index % base);
    index /= base;
    f /= base;
  }
  return result;
}

Eigen::VectorXd ToEigen(const std::vector<double>& v) {
  return Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size()));
}

// Indices of up to `limit` points: the best half by loss (ties by index), then
// a seeded uniform sample of the rest. All of them when there are few.
std::vector<int> SelectPoints(const std::vector<double>& loss, int limit, Rng& rng) {
  const int n = static_cast<int>(loss.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (n <= limit) return order;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return loss[a] < loss[b]; });
  const int best = limit / 2;
  std::vector<int> chosen(order.begin(), order.begin() + best);
  std::vector<int> rest(order.begin() + best, order.end());
  // Partial Fisher-Yates shuffle of the rest.
  for (int i = 0; i < limit - best; ++i) {
    const int j = i + static_cast<int>(rng.UniformInt(rest.size() - i));
    std::swap(rest[i], rest[j]);
    chosen.push_back(rest[i]);
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

Eigen::MatrixXd Rows(const std::vector<std::vector<double>>& points, const std::vector<int>& idx,
                     int dims) {
  Eigen::MatrixXd m(idx.size(), dims);
  for (size_t i = 0; i < idx.size(); ++i) m.row(i) = ToEigen(points[idx[i]]).transpose();
  return m;
}

// A GP on standardised losses: the hyperparameters fitted (MAP) on at most
// `max_fit_points` of the points, the GP conditioned on all of them.
struct Surrogate {
  Eigen::VectorXd y;  // the standardised losses
  GpHyperparameters h;
  std::optional<GaussianProcess> gp;  // empty when the kernel cannot be factored
};

Surrogate FitSurrogate(const Eigen::MatrixXd& x, const Eigen::VectorXd& loss, Rng& rng,
                       const BayesianOptions& options) {
  Surrogate s;
  const double mean = loss.mean();
  double sd = std::sqrt((loss.array() - mean).square().mean());
  if (!(sd > 1e-12 * std::max(1.0, std::abs(mean)))) sd = 1.0;
  s.y = (loss.array() - mean) / sd;
  std::vector<double> y_all(s.y.data(), s.y.data() + s.y.size());
  std::vector<int> fit_idx = SelectPoints(y_all, options.max_fit_points, rng);
  Eigen::MatrixXd x_fit(fit_idx.size(), x.cols());
  Eigen::VectorXd y_fit(fit_idx.size());
  for (size_t i = 0; i < fit_idx.size(); ++i) {
    x_fit.row(i) = x.row(fit_idx[i]);
    y_fit[i] = s.y[fit_idx[i]];
  }
  s.h = FitHyperparameters(x_fit, y_fit, rng, options.fit);
  absl::StatusOr<GaussianProcess> gp = GaussianProcess::Fit(x, s.y, s.h);
  if (gp.ok()) s.gp.emplace(*std::move(gp));
  return s;
}

// Nearest-better clustering (Preuss): every point but the best links to the
// nearest point (rows of `scaled`, Euclidean) with a lower loss (ties broken
// by index); links longer than `cut` times the median link are cut, and the
// points whose chain of links reaches the best point form its basin. A basin
// is thereby the set of trials a descent would lead to the incumbent, however
// long it is along the directions that do not matter, while a good point
// separated from it by a gap longer than the usual spacing of the data starts
// a basin of its own.
std::vector<bool> IncumbentBasin(const Eigen::MatrixXd& scaled, const Eigen::VectorXd& loss,
                                 double cut) {
  const Eigen::Index n = scaled.rows();
  auto better = [&](Eigen::Index a, Eigen::Index b) {
    return loss[a] < loss[b] || (loss[a] == loss[b] && a < b);
  };
  std::vector<Eigen::Index> parent(n, -1);
  std::vector<double> link(n, 0.0), links;
  for (Eigen::Index i = 0; i < n; ++i) {
    double nearest = std::numeric_limits<double>::infinity();
    for (Eigen::Index j = 0; j < n; ++j) {
      if (!better(j, i)) continue;
      const double d = (scaled.row(i) - scaled.row(j)).squaredNorm();
      if (d < nearest) nearest = d, parent[i] = j;
    }
    if (parent[i] >= 0) links.push_back(link[i] = std::sqrt(nearest));
  }
  if (links.empty()) return std::vector<bool>(n, true);
  std::vector<bool> in_basin(n, false);
  std::nth_element(links.begin(), links.begin() + links.size() / 2, links.end());
  const double limit = cut * links[links.size() / 2];
  // Parents are better than their children: visiting from best to worst
  // settles every parent before its children.
  std::vector<Eigen::Index> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), better);
  in_basin[order[0]] = true;
  for (Eigen::Index i : order) {
    if (parent[i] >= 0 && link[i] <= limit) in_basin[i] = in_basin[parent[i]];
  }
  return in_basin;
}

// The fitted surrogate and the acquisition over it, for one Suggest call.
class Model {
 public:
  static std::optional<Model> Build(const SearchSpace& space, const BayesianOptions& options,
                                    const ParsedHistory& history, Rng& rng, bool explore) {
    Model m(space, options);
    m.fidelity_ = history.fidelity;
    const int inputs = m.Inputs();
    std::vector<int> train = SelectPoints(history.observed_loss, options.max_training_points, rng);
    Eigen::VectorXd loss(train.size());
    for (size_t i = 0; i < train.size(); ++i) loss[i] = history.observed_loss[train[i]];
    Eigen::MatrixXd x = Rows(history.observed_x, train, inputs);
    Surrogate s = FitSurrogate(x, loss, rng, options);
    if (!s.gp) return std::nullopt;
    if (options.gls_mean) {
      // Generalised least squares: weights K^-1 1 count a tight cluster of
      // correlated points about once, so the many trials spent in the
      // incumbent's basin no longer pull the far-from-data prediction down
      // to their level (which made every unexplored corner look promising).
      const Eigen::VectorXd w = s.gp->Solve(Eigen::VectorXd::Ones(s.y.size()));
      const double level = w.dot(s.y) / w.sum();
      if (std::isfinite(level)) {
        s.y.array() -= level;
        s.gp = s.gp->WithTargets(s.y);
      }
    }
    if (explore) {
      // The rest of the space gets a model of its own, standardised and
      // fitted without the incumbent's basin: with the basin's trials in,
      // the length scales are those of that basin (which may ignore the
      // very parameters another basin depends on) and the level of the
      // plateau is dragged towards the basin's values.
      const Eigen::VectorXd inv_length = s.h.length_scales.cwiseInverse();
      Eigen::MatrixXd scaled = x * inv_length.asDiagonal();
      const std::vector<bool> in_basin = IncumbentBasin(scaled, loss, options.basin_link_cut);
      std::vector<int> other;
      for (int i = 0; i < static_cast<int>(in_basin.size()); ++i) {
        if (!in_basin[i]) other.push_back(i);
      }
      if (static_cast<int>(other.size()) >= kMinOtherPoints) {
        Eigen::MatrixXd other_x(other.size(), inputs);
        Eigen::VectorXd other_loss(other.size());
        for (size_t i = 0; i < other.size(); ++i) {
          other_x.row(i) = x.row(other[i]);
          other_loss[i] = loss[other[i]];
        }
        Surrogate other_model = FitSurrogate(other_x, other_loss, rng, options);
        if (other_model.gp) {
          m.basin_inv_length_ = inv_length;
          m.basin_scaled_ = std::move(scaled);
          m.in_basin_ = in_basin;
          x = std::move(other_x);
          s = std::move(other_model);
        }
      }
    }
    Eigen::VectorXd y = std::move(s.y);
    // Improvement is measured against the best point the model sees: on an
    // exploration step, the best outside the incumbent's basin, so the step
    // climbs the most promising other basin. With resources, the best at the
    // full one: a value after one epoch is no bar for a full run. Where the
    // model sees none there (an exploration step whose full runs are all in
    // the basin), the best it sees is the bar: lower than any full run's
    // prediction, so EI still ranks candidates by their chance to beat it.
    m.best_ = std::numeric_limits<double>::infinity();
    for (Eigen::Index i = 0; i < y.size(); ++i) {
      if (!m.fidelity_ || x(i, inputs - 1) >= 1.0) m.best_ = std::min(m.best_, y[i]);
    }
    if (!std::isfinite(m.best_)) m.best_ = y.minCoeff();

    std::vector<int> order(y.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return y[a] < y[b]; });
    // Local candidates start from the best (eligible) observed points.
    for (size_t i = 0; i < order.size() && m.anchors_.size() < 5; ++i) {
      // With resources a trial is a point at each of its rungs: one anchor each.
      const Eigen::VectorXd anchor = x.row(order[i]).head(space.num_features()).transpose();
      if (m.Excluded(m.AtFullResource(anchor))) continue;
      if (std::find(m.anchors_.begin(), m.anchors_.end(), anchor) == m.anchors_.end()) {
        m.anchors_.push_back(anchor);
      }
    }

    // Pending trials enter as kriging believers: their value is the mean the
    // model already predicts, so they shrink the variance around them without
    // pretending to know the outcome.
    m.x_ = std::move(x);
    m.y_ = std::move(y);
    m.gp_.emplace(*std::move(s.gp));
    if (!history.pending_x.empty()) {
      Eigen::MatrixXd px(history.pending_x.size(), inputs);
      for (size_t i = 0; i < history.pending_x.size(); ++i) {
        px.row(i) = ToEigen(history.pending_x[i]).transpose();
      }
      m.AddBelievers(px);
    }
    return m;
  }

  // The unused assignment with the highest expected improvement, or nullopt
  // when no candidate is unused.
  std::optional<Assignment> Next(Rng& rng, const std::unordered_set<std::string>& used) const {
    const int dims = space_->num_features();
    std::optional<uint64_t> finite = space_->FiniteSize();
    if (finite && *finite <= static_cast<uint64_t>(options_->enumerate_limit)) {
      std::vector<Assignment> unused;
      for (uint64_t i = 0; i < *finite; ++i) {
        Assignment a = space_->GridPoint(i);
        if (!used.contains(AssignmentKey(a))) unused.push_back(std::move(a));
      }
      return BestOf(unused);
    }

    const int num_random = options_->random_candidates > 0 ? options_->random_candidates
                                                           : std::min(4000, 1000 + 250 * dims);
    const int per_anchor =
        anchors_.empty() ? 0 : options_->local_candidates / static_cast<int>(anchors_.size());
    Eigen::MatrixXd cands(num_random + per_anchor * anchors_.size(), Inputs());
    if (fidelity_) cands.col(dims).setOnes();
    Eigen::Index row = 0;
    for (int i = 0; i < num_random; ++i, ++row) {
      for (int d = 0; d < dims; ++d) cands(row, d) = rng.Uniform();
    }
    static constexpr double kScales[] = {0.003, 0.03, 0.1, 0.3};
    for (const Eigen::VectorXd& anchor : anchors_) {
      for (int i = 0; i < per_anchor; ++i, ++row) {
        const double scale = kScales[i % 4];
        for (int d = 0; d < dims; ++d) {
          cands(row, d) = std::clamp(anchor[d] + scale * rng.Normal(), 0.0, 1.0);
        }
      }
    }
    Eigen::VectorXd scores = Score(cands);
    std::vector<int> order(cands.rows());
    std::iota(order.begin(), order.end(), 0);
    const int keep = std::min<int>(100, static_cast<int>(order.size()));
    std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                      [&](int a, int b) { return scores[a] > scores[b]; });

    std::vector<Eigen::VectorXd> pool;
    for (int s = 0; s < options_->refine_starts && s < keep; ++s) {
      pool.push_back(Refine(cands.row(order[s]).head(dims).transpose()));
    }
    for (int s = 0; s < keep; ++s) pool.push_back(cands.row(order[s]).head(dims).transpose());
    std::vector<Assignment> unused;
    std::unordered_set<std::string> seen;
    for (const Eigen::VectorXd& x : pool) {
      Assignment a = space_->Decode(std::span<const double>(x.data(), x.size()));
      std::string key = AssignmentKey(a);
      if (used.contains(key) || !seen.insert(key).second) continue;
      unused.push_back(std::move(a));
    }
    return BestOf(unused);
  }

  // Conditions the model on `points` at their current posterior means.
  void AddBelievers(const Eigen::MatrixXd& points) {
    Eigen::VectorXd mean, var;
    gp_->Predict(points, &mean, &var);
    const Eigen::Index n = x_.rows();
    x_.conservativeResize(n + points.rows(), Eigen::NoChange);
    y_.conservativeResize(n + points.rows());
    x_.bottomRows(points.rows()) = points;
    y_.tail(points.rows()) = mean;
    // The believed values count as observations for the incumbent too;
    // otherwise the point just taken keeps its expected improvement and the
    // batch collapses onto it.
    best_ = std::min(best_, mean.minCoeff());
    absl::StatusOr<GaussianProcess> gp = GaussianProcess::Fit(x_, y_, gp_->hyperparameters());
    // A failed refit keeps the previous model: the batch is then less
    // diverse, never wrong (duplicates are excluded by key).
    if (gp.ok()) gp_.emplace(*std::move(gp));
  }

  void AddBeliever(const Assignment& a) {
    // Past this many believers a batch stops refitting the model (each refit
    // is O(n^3)); the rest of the batch still never repeats a point.
    if (++believers_ > kMaxBatchBelievers) return;
    absl::StatusOr<std::vector<double>> u = space_->Encode(a);
    if (!u.ok()) return;
    AddBelievers(AtFullResource(ToEigen(*u)).transpose());
  }

  // The model's inputs: the cube's coordinates and, under
  // HalvingModel::kEveryRung, the resource last (candidates are scored at
  // the full one, 1).
  int Inputs() const { return space_->num_features() + (fidelity_ ? 1 : 0); }

  // A cube point as the model's input: with resources, at the full one.
  Eigen::VectorXd AtFullResource(const Eigen::VectorXd& cube) const {
    if (!fidelity_) return cube;
    Eigen::VectorXd x(cube.size() + 1);
    x << cube, 1.0;
    return x;
  }

 private:
  Model(const SearchSpace& space, const BayesianOptions& options)
      : space_(&space), options_(&options) {}

  // On an exploration step, whether `point` lies in the incumbent's basin:
  // its nearest trial (in the full model's length-scale units) is one of
  // the basin's.
  bool Excluded(const Eigen::VectorXd& point) const {
    if (in_basin_.empty()) return false;
    const Eigen::RowVectorXd p = point.cwiseProduct(basin_inv_length_).transpose();
    Eigen::Index nearest;
    (basin_scaled_.rowwise() - p).rowwise().squaredNorm().minCoeff(&nearest);
    return in_basin_[nearest];
  }

  Eigen::VectorXd Score(const Eigen::MatrixXd& points) const {
    Eigen::VectorXd mean, var;
    gp_->Predict(points, &mean, &var);
    Eigen::VectorXd out(points.rows());
    for (Eigen::Index i = 0; i < points.rows(); ++i) {
      out[i] = Excluded(points.row(i).transpose())
                   ? -std::numeric_limits<double>::infinity()
                   : LogExpectedImprovement(mean[i], var[i], best_, nullptr, nullptr);
    }
    return out;
  }

  // Projected L-BFGS on -log EI from `start`, inside the cube (at the full
  // resource, which stays fixed).
  Eigen::VectorXd Refine(const Eigen::VectorXd& start) const {
    const Eigen::Index dims = start.size();
    auto objective = [this, dims](const Eigen::VectorXd& x, Eigen::VectorXd* grad) {
      double mean, var;
      Eigen::VectorXd dmean, dvar;
      gp_->PredictWithGradient(AtFullResource(x), &mean, &var, &dmean, &dvar);
      double dm, dv;
      const double value = LogExpectedImprovement(mean, var, best_, &dm, &dv);
      *grad = -(dm * dmean + dv * dvar).head(dims);
      return -value;
    };
    MinimizeOptions mo;
    mo.max_iterations = 40;
    mo.max_evaluations = 80;
    mo.relative_tolerance = 1e-10;
    mo.gradient_tolerance = 1e-9;
    return MinimizeInBox(objective, start, Eigen::VectorXd::Zero(dims), Eigen::VectorXd::Ones(dims),
                         mo)
        .x;
  }

  // Scores assignments at their canonical cube points (rounding inside the
  // acquisition) and returns the best.
  std::optional<Assignment> BestOf(std::vector<Assignment>& candidates) const {
    if (candidates.empty()) return std::nullopt;
    Eigen::MatrixXd points(candidates.size(), Inputs());
    for (size_t i = 0; i < candidates.size(); ++i) {
      points.row(i) = AtFullResource(ToEigen(*space_->Encode(candidates[i]))).transpose();
    }
    Eigen::VectorXd scores = Score(points);
    Eigen::Index best;
    scores.maxCoeff(&best);
    return std::move(candidates[best]);
  }

  const SearchSpace* space_;
  const BayesianOptions* options_;
  Eigen::MatrixXd x_;
  Eigen::VectorXd y_;
  std::optional<GaussianProcess> gp_;
  double best_ = 0;
  bool fidelity_ = false;  // ParsedHistory::fidelity
  // Exploration steps set the incumbent's basin aside: the trials (scaled
  // by the full model's length scales) and which of them are in the basin.
  // Empty on other steps.
  Eigen::VectorXd basin_inv_length_;
  Eigen::MatrixXd basin_scaled_;
  std::vector<bool> in_basin_;
  // Fewer trials than this outside the basin are too few to model the rest
  // of the space; the step is then an ordinary one.
  static constexpr int kMinOtherPoints = 3;
  static constexpr int kMaxBatchBelievers = 32;
  int believers_ = 0;
  std::vector<Eigen::VectorXd> anchors_;
};

// True when the best loss improved by less than stall_tolerance standard
// deviations (of all losses) over the last stall_window observations.
bool Stalled(const std::vector<double>& loss, const BayesianOptions& options) {
  const int n = static_cast<int>(loss.size());
  if (n <= options.stall_window) return false;
  const double before = *std::min_element(loss.begin(), loss.end() - options.stall_window);
  const double now = *std::min_element(loss.begin(), loss.end());
  double mean = 0, sq = 0;
  for (double v : loss) mean += v / n;
  for (double v : loss) sq += (v - mean) * (v - mean) / n;
  return before - now <= options.stall_tolerance * std::sqrt(sq);
}

// A uniform unused point, or the first unused grid point of a finite space;
// nullopt when the space is exhausted (or, for an infinite space, when
// thousands of draws all collide, which does not happen in practice).
std::optional<Assignment> AnyUnused(const SearchSpace& space, Rng& rng,
                                    const std::unordered_set<std::string>& used) {
  for (int tries = 0; tries < 2000; ++tries) {
    Assignment a = space.SampleUniform(rng);
    if (!used.contains(AssignmentKey(a))) return a;
  }
  if (std::optional<uint64_t> size = space.FiniteSize()) {
    for (uint64_t i = 0; i < *size; ++i) {
      Assignment a = space.GridPoint(i);
      if (!used.contains(AssignmentKey(a))) return a;
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<double> HaltonPoint(uint64_t index, int dims, const std::vector<double>& shift) {
  static const std::vector<int> kPrimes = FirstPrimes(1000);
  std::vector<double> u(dims);
  for (int d = 0; d < dims; ++d) {
    const int base = kPrimes[d % kPrimes.size()];
    double v = RadicalInverse(index, base) + (d < static_cast<int>(shift.size()) ? shift[d] : 0.0);
    u[d] = v - std::floor(v);
  }
  return u;
}

BayesianOptimizer::BayesianOptimizer(SearchSpace space, v1::HyperparameterSpec spec, uint64_t seed,
                                     BayesianOptions options)
    : space_(std::move(space)), spec_(std::move(spec)), seed_(seed), options_(options) {
  Rng rng(seed_ ^ 0x5851f42d4c957f2dULL);
  halton_shift_.resize(space_.num_features());
  for (double& s : halton_shift_) s = rng.Uniform();
}

std::vector<Assignment> BayesianOptimizer::Suggest(const std::vector<TrialRecord>& history,
                                                   int count) {
  std::vector<Assignment> out;
  if (count <= 0) return out;
  ParsedHistory h = ParseHistory(space_, spec_, history, options_.halving_model);
  if (std::optional<uint64_t> size = space_.FiniteSize(); size && h.distinct_points >= *size) {
    return out;  // exhausted
  }
  Rng rng(CallSeed(seed_, history.size()));
  const int dims = space_.num_features();
  const int design_size =
      options_.initial_design > 0 ? options_.initial_design : std::clamp(dims + 3, 5, 10);
  int64_t design_index = h.num_records;
  // models[0] is the ordinary model, models[1] the one that sets the
  // incumbent's basin aside (explore_every); each is built when first needed.
  std::optional<Model> models[2];
  bool failed[2] = {false, false};
  const bool stalled = options_.explore_every > 0 && Stalled(h.progress_loss, options_);

  for (int j = 0; j < count; ++j) {
    std::optional<Assignment> next;
    // Decided per batch member, so a batch explores as often as the same
    // number of sequential steps would.
    const int64_t step = h.num_records + j;
    const bool explore =
        stalled && step % options_.explore_every >= options_.explore_every - options_.explore_steps;
    const bool use_design = design_index < design_size || h.observed_x.size() < 2 || failed[0];
    if (use_design) {
      for (int tries = 0; tries < 64 && !next; ++tries, ++design_index) {
        std::vector<double> u = design_index == 0 ? std::vector<double>(dims, 0.5)
                                                  : HaltonPoint(design_index, dims, halton_shift_);
        Assignment a = space_.Decode(u);
        if (!h.used.contains(AssignmentKey(a))) next = std::move(a);
      }
    } else {
      // An exploration model that cannot be built falls back to the ordinary one.
      for (int which = explore ? 1 : 0; which >= 0 && !next; --which) {
        if (!models[which] && !failed[which]) {
          models[which] = Model::Build(space_, options_, h, rng, which == 1);
          failed[which] = !models[which].has_value();
        }
        if (models[which]) next = models[which]->Next(rng, h.used);
      }
    }
    if (!next) next = AnyUnused(space_, rng, h.used);
    if (!next) break;  // exhausted
    h.used.insert(AssignmentKey(*next));
    for (std::optional<Model>& model : models) {
      if (model) model->AddBeliever(*next);
    }
    if (absl::StatusOr<std::vector<double>> u = space_.Encode(*next); u.ok()) {
      if (h.fidelity) u->push_back(1.0);
      h.pending_x.push_back(*u);  // seen as pending by a model built later in this batch
    }
    out.push_back(std::move(*next));
  }
  return out;
}

}  // namespace kubetrain::tuner
