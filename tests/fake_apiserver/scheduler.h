#pragma once

// The fake API server's stand-in for kube-scheduler (FakeApiServer::Options::
// schedule_pods), and the quantities its ResourceQuota admission adds up.
// Written apart from the operator's own admission planner
// (operator/core/gang_admission.h), so a test of one against the other
// checks two readings of the same rules, not one twice.
//
// What it keeps of the real scheduler: pods are placed one at a time, in the
// order they were created, each on a node where its requests (per resource,
// the sum over containers, a container's limits standing in for requests it
// does not make; init containers' largest; one "pods") fit the node's
// status.allocatable minus the requests of the pods bound there that are
// neither Succeeded nor Failed; a node must be schedulable, match
// spec.nodeSelector and have no NoSchedule/NoExecute taint the pod does not
// tolerate; of the nodes that fit, the one with the most cpu free (the
// default scorer spreads). A pod that fits nowhere gets PodScheduled=False,
// reason Unschedulable, and a message in the real scheduler's form ("0/3
// nodes are available: 3 Insufficient cpu."). Not kept: node affinity,
// pod (anti-)affinity, topology spread, preemption, backoff, volumes.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kubetrain::fake_apiserver {

// A quantity in thousandths ("500m" -> 500, "1Gi" -> 1073741824000); nullopt
// when it is not one this fake reads (plain and decimal numbers, m, k M G T,
// Ki Mi Gi Ti).
std::optional<int64_t> QuantityMilli(const nlohmann::json& quantity);

// A pod's requests by resource, in thousandths, "pods" 1 included.
std::map<std::string, int64_t> PodRequests(const nlohmann::json& pod);

// Whether the pod still holds what it requested (its phase is neither
// Succeeded nor Failed).
bool PodHoldsResources(const nlohmann::json& pod);

struct SchedulingDecision {
  size_t pod = 0;       // index into the pods given
  std::string node;     // bound here; "" when it fits nowhere
  std::string message;  // the Unschedulable message when `node` is ""
};

// Places the unbound pods among `pods` (spec.nodeName empty, holding
// resources, and spec.schedulerName empty or default-scheduler: a pod for
// another scheduler gets no decision) in the order given, onto `nodes`, counting the bound ones.
std::vector<SchedulingDecision> SchedulePods(const std::vector<nlohmann::json>& nodes,
                                             const std::vector<nlohmann::json>& pods);

}  // namespace kubetrain::fake_apiserver
