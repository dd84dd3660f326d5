#pragma once

// What the process table (/proc) and PATH say, for the local backend: the
// launcher and the controller find replicas again by pid and start time.

#include <cstdint>
#include <optional>
#include <string>

namespace kubetrain::local {

// The start time of `pid` in clock ticks since boot (/proc/<pid>/stat field
// 22); nullopt when there is no such process or it is a zombie.
std::optional<uint64_t> ProcessStartTicks(int pid);

// True when `pid` runs and, if `start_ticks` is not 0, started then.
bool ProcessAlive(int pid, uint64_t start_ticks);

// Finds an executable: a name with a '/' as is (if executable), else on $PATH.
std::optional<std::string> FindExecutable(const std::string& name);

// True while any live (non-zombie) process is in group `pgid` (a scan of
// /proc; kill(-pgid, 0) where /proc cannot be read).
bool GroupAlive(int pgid);

}  // namespace kubetrain::local
