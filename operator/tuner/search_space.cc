#include "operator/tuner/search_space.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::tuner {
namespace {

using v1::ParameterSpec;

bool IsLog(ParameterSpec::ScaleType s) {
  return s == ParameterSpec::UNIT_LOG_SCALE || s == ParameterSpec::UNIT_REVERSE_LOG_SCALE;
}

std::optional<double> ParseDouble(const std::string& text) {
  double value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string ParamError(const std::string& name, const std::string& what) {
  return absl::StrCat("parameter \"", name, "\": ", what);
}

}  // namespace

std::string FormatDouble(double value) {
  if (value == 0) return "0";
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, ptr);
}

std::string AssignmentKey(const Assignment& assignment) {
  std::string key;
  for (const auto& [name, value] : assignment) {
    absl::StrAppend(&key, name.size(), ":", name, "=", value.size(), ":", value, ";");
  }
  return key;
}

absl::StatusOr<SearchSpace> SearchSpace::Create(const v1::HyperparameterSpec& spec) {
  SearchSpace space;
  if (spec.params().empty()) {
    return absl::InvalidArgumentError("hyperparameters.params: at least one parameter is needed");
  }
  std::set<std::string> names;
  unsigned __int128 size = 1;
  bool finite = true;
  for (int i = 0; i < spec.params_size(); ++i) {
    const ParameterSpec& ps = spec.params(i);
    Param p;
    p.name = ps.parameter_name();
    p.type = ps.type();
    p.scale = ps.scale_type();
    p.offset = space.num_features_;
    if (p.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hyperparameters.params[", i, "].parameterName: empty"));
    }
    if (!names.insert(p.name).second) {
      return absl::InvalidArgumentError(ParamError(p.name, "duplicate name"));
    }
    switch (p.type) {
      case ParameterSpec::DOUBLE:
      case ParameterSpec::INTEGER: {
        if (!ps.has_min_value() || !ps.has_max_value()) {
          return absl::InvalidArgumentError(ParamError(p.name, "minValue and maxValue are needed"));
        }
        double mn = ps.min_value(), mx = ps.max_value();
        if (!std::isfinite(mn) || !std::isfinite(mx) || mn > mx) {
          return absl::InvalidArgumentError(
              ParamError(p.name, "needs finite minValue <= maxValue"));
        }
        if (p.type == ParameterSpec::INTEGER) {
          if (mn != std::floor(mn) || mx != std::floor(mx) || std::abs(mn) > 0x1p53 ||
              std::abs(mx) > 0x1p53) {
            return absl::InvalidArgumentError(
                ParamError(p.name, "INTEGER bounds must be integers below 2^53"));
          }
          p.int_min = static_cast<int64_t>(mn);
          p.int_max = static_cast<int64_t>(mx);
          p.cardinality = static_cast<uint64_t>(p.int_max - p.int_min) + 1;
          mn -= 0.5;
          mx += 0.5;
        } else {
          finite = false;
        }
        if (IsLog(p.scale) && mn <= 0) {
          return absl::InvalidArgumentError(
              ParamError(p.name, "a log scale needs minValue > 0 (> 0.5 for INTEGER)"));
        }
        p.lo = mn;
        p.hi = mx;
        space.num_features_ += 1;
        break;
      }
      case ParameterSpec::DISCRETE: {
        if (ps.discrete_values().empty()) {
          return absl::InvalidArgumentError(ParamError(p.name, "discreteValues is empty"));
        }
        for (double v : ps.discrete_values()) {
          if (!std::isfinite(v)) {
            return absl::InvalidArgumentError(ParamError(p.name, "discreteValues must be finite"));
          }
          p.discrete.push_back(v == 0 ? 0.0 : v);
        }
        std::sort(p.discrete.begin(), p.discrete.end());
        p.discrete.erase(std::unique(p.discrete.begin(), p.discrete.end()), p.discrete.end());
        p.lo = p.discrete.front();
        p.hi = p.discrete.back();
        if (IsLog(p.scale) && p.lo <= 0) {
          return absl::InvalidArgumentError(
              ParamError(p.name, "a log scale needs positive discreteValues"));
        }
        p.cardinality = p.discrete.size();
        space.num_features_ += 1;
        break;
      }
      case ParameterSpec::CATEGORICAL: {
        if (ps.categorical_values().empty()) {
          return absl::InvalidArgumentError(ParamError(p.name, "categoricalValues is empty"));
        }
        std::set<std::string> seen;
        for (const std::string& c : ps.categorical_values()) {
          if (seen.insert(c).second) p.categories.push_back(c);
        }
        p.cardinality = p.categories.size();
        space.num_features_ += static_cast<int>(p.categories.size());
        break;
      }
      default:
        return absl::InvalidArgumentError(ParamError(p.name, "type is unspecified or unknown"));
    }
    if (p.cardinality == 0) {
      finite = false;
    } else if (finite) {
      size *= p.cardinality;
      if (size > (static_cast<unsigned __int128>(1) << 63)) finite = false;
    }
    space.params_.push_back(std::move(p));
  }
  // Coordinates of DISCRETE values are computed once the Param is final.
  for (Param& p : space.params_) {
    for (double v : p.discrete) p.discrete_unit.push_back(space.ToUnit(p, v));
  }
  if (finite) space.finite_size_ = static_cast<uint64_t>(size);
  return space;
}

double SearchSpace::ToUnit(const Param& p, double x) const {
  if (p.hi <= p.lo) return 0.5;
  double u;
  switch (p.scale) {
    case ParameterSpec::UNIT_LOG_SCALE:
      u = std::log(x / p.lo) / std::log(p.hi / p.lo);
      break;
    case ParameterSpec::UNIT_REVERSE_LOG_SCALE:
      u = 1.0 - std::log((p.hi + p.lo - x) / p.lo) / std::log(p.hi / p.lo);
      break;
    default:
      u = (x - p.lo) / (p.hi - p.lo);
  }
  return std::clamp(u, 0.0, 1.0);
}

double SearchSpace::FromUnit(const Param& p, double u) const {
  if (p.hi <= p.lo) return p.lo;
  u = std::clamp(u, 0.0, 1.0);
  double x;
  switch (p.scale) {
    case ParameterSpec::UNIT_LOG_SCALE:
      x = p.lo * std::exp(u * std::log(p.hi / p.lo));
      break;
    case ParameterSpec::UNIT_REVERSE_LOG_SCALE:
      x = p.hi + p.lo - p.lo * std::exp((1.0 - u) * std::log(p.hi / p.lo));
      break;
    default:
      x = p.lo + u * (p.hi - p.lo);
  }
  // exp/log round-off must not step outside the declared range.
  if (u == 0.0) x = p.lo;
  if (u == 1.0) x = p.hi;
  return std::clamp(x, p.lo, p.hi);
}

std::string SearchSpace::DecodeParam(const Param& p, std::span<const double> unit) const {
  switch (p.type) {
    case ParameterSpec::DOUBLE:
      return FormatDouble(FromUnit(p, unit[p.offset]));
    case ParameterSpec::INTEGER: {
      double x = std::round(FromUnit(p, unit[p.offset]));
      int64_t v = std::clamp(static_cast<int64_t>(x), p.int_min, p.int_max);
      return std::to_string(v);
    }
    case ParameterSpec::DISCRETE: {
      double u = std::clamp(unit[p.offset], 0.0, 1.0);
      // discrete_unit is ascending (warps are monotone): the nearest is one
      // of the two neighbours of the insertion point.
      auto it = std::lower_bound(p.discrete_unit.begin(), p.discrete_unit.end(), u);
      size_t i = static_cast<size_t>(it - p.discrete_unit.begin());
      if (i == p.discrete_unit.size()) {
        i -= 1;
      } else if (i > 0 && u - p.discrete_unit[i - 1] <= p.discrete_unit[i] - u) {
        i -= 1;
      }
      return FormatDouble(p.discrete[i]);
    }
    case ParameterSpec::CATEGORICAL: {
      size_t best = 0;
      for (size_t k = 1; k < p.categories.size(); ++k) {
        if (unit[p.offset + k] > unit[p.offset + best]) best = k;
      }
      return p.categories[best];
    }
    default:
      return "";
  }
}

Assignment SearchSpace::Decode(std::span<const double> unit) const {
  Assignment out;
  for (const Param& p : params_) out[p.name] = DecodeParam(p, unit);
  return out;
}

absl::StatusOr<std::vector<double>> SearchSpace::Encode(const Assignment& assignment) const {
  std::vector<double> unit(num_features_, 0.0);
  for (const Param& p : params_) {
    auto it = assignment.find(p.name);
    if (it == assignment.end()) {
      return absl::InvalidArgumentError(ParamError(p.name, "missing from the assignment"));
    }
    const std::string& text = it->second;
    if (p.type == ParameterSpec::CATEGORICAL) {
      auto c = std::find(p.categories.begin(), p.categories.end(), text);
      if (c == p.categories.end()) {
        return absl::InvalidArgumentError(
            ParamError(p.name, absl::StrCat("\"", text, "\" is not a listed category")));
      }
      unit[p.offset + (c - p.categories.begin())] = 1.0;
      continue;
    }
    std::optional<double> value = ParseDouble(text);
    if (!value) {
      return absl::InvalidArgumentError(
          ParamError(p.name, absl::StrCat("\"", text, "\" is not a number")));
    }
    double x = *value;
    if (p.type == ParameterSpec::INTEGER) {
      if (x != std::floor(x) || x < p.int_min || x > p.int_max) {
        return absl::InvalidArgumentError(ParamError(
            p.name,
            absl::StrCat(text, " is not an integer in [", p.int_min, ", ", p.int_max, "]")));
      }
    } else if (p.type == ParameterSpec::DISCRETE) {
      auto near = std::min_element(p.discrete.begin(), p.discrete.end(), [x](double a, double b) {
        return std::abs(a - x) < std::abs(b - x);
      });
      if (std::abs(*near - x) > 1e-9 * std::max(1.0, std::abs(x))) {
        return absl::InvalidArgumentError(
            ParamError(p.name, absl::StrCat(text, " is not one of the discreteValues")));
      }
      unit[p.offset] = p.discrete_unit[near - p.discrete.begin()];
      continue;
    } else if (x < p.lo || x > p.hi) {
      return absl::InvalidArgumentError(ParamError(
          p.name,
          absl::StrCat(text, " is outside [", FormatDouble(p.lo), ", ", FormatDouble(p.hi), "]")));
    }
    unit[p.offset] = ToUnit(p, x);
  }
  return unit;
}

absl::StatusOr<Assignment> SearchSpace::Canonicalize(const Assignment& assignment) const {
  absl::StatusOr<std::vector<double>> unit = Encode(assignment);
  if (!unit.ok()) return unit.status();
  Assignment out;
  for (const Param& p : params_) {
    // DOUBLE values print as given: their cube coordinate may not decode to
    // the same double bit for bit.
    if (p.type == ParameterSpec::DOUBLE) {
      out[p.name] = FormatDouble(*ParseDouble(assignment.at(p.name)));
    } else {
      out[p.name] = DecodeParam(p, *unit);
    }
  }
  return out;
}

Assignment SearchSpace::SampleUniform(Rng& rng) const {
  std::vector<double> unit(num_features_, 0.0);
  for (const Param& p : params_) {
    switch (p.type) {
      case ParameterSpec::DISCRETE:
        unit[p.offset] = p.discrete_unit[rng.UniformInt(p.discrete.size())];
        break;
      case ParameterSpec::CATEGORICAL:
        unit[p.offset + rng.UniformInt(p.categories.size())] = 1.0;
        break;
      default:
        unit[p.offset] = rng.Uniform();
    }
  }
  return Decode(unit);
}

std::string SearchSpace::GridValue(const Param& p, uint64_t i) const {
  switch (p.type) {
    case ParameterSpec::INTEGER:
      return std::to_string(p.int_min + static_cast<int64_t>(i));
    case ParameterSpec::DISCRETE:
      return FormatDouble(p.discrete[i]);
    case ParameterSpec::CATEGORICAL:
      return p.categories[i];
    default:
      return "";
  }
}

Assignment SearchSpace::GridPoint(uint64_t index) const {
  Assignment out;
  for (auto p = params_.rbegin(); p != params_.rend(); ++p) {
    const uint64_t n = p->cardinality == 0 ? 1 : p->cardinality;
    out[p->name] = GridValue(*p, index % n);
    index /= n;
  }
  return out;
}

}  // namespace kubetrain::tuner
