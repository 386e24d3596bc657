// One machine's compute, shared between the processes that use it: tasks
// that compute (compiling, planning) hold the machine lock shared, and a
// measurement (support/Measure.h) takes it exclusive while it times, so
// that no compile on the machine steals a core from a timed run. The lock
// is an flock on a file per user (MeasureOptions::lockPath).
#pragma once

#include <string>

namespace flowc {

/// The lock file of this user's processes on this machine.
std::string machineLockPath();

/// Holds the machine lock shared for its lifetime (a compile task). While
/// it is held, a measurement in this process converts the hold to exclusive
/// for its timing and back after, instead of waiting on itself. A lock that
/// cannot be taken is logged once and the work goes on without it.
class SharedMachineLock {
public:
  explicit SharedMachineLock(const std::string &path);
  SharedMachineLock(const SharedMachineLock &) = delete;
  SharedMachineLock &operator=(const SharedMachineLock &) = delete;
  ~SharedMachineLock();
};

/// Holds the machine lock exclusive for its lifetime (a measurement's
/// timing): converts this process's shared hold when there is one, takes
/// its own otherwise. An empty path: no lock.
class ExclusiveMachineLock {
public:
  explicit ExclusiveMachineLock(const std::string &path);
  ExclusiveMachineLock(const ExclusiveMachineLock &) = delete;
  ExclusiveMachineLock &operator=(const ExclusiveMachineLock &) = delete;
  ~ExclusiveMachineLock();

private:
  int ownFd_ = -1;
  bool converted_ = false;
};

} // namespace flowc
