// ThreadSanitizer annotations for abseil's Mutex and CondVar, linked into
// every binary of the KUBETRAIN_TSAN build (see CMakeLists.txt).
//
// Why: Debian's libabsl is built without ThreadSanitizer, so the lock and
// unlock inside it are invisible and every access guarded by an absl::Mutex
// would be reported as a race. abseil built with TSan annotates its own
// Mutex (absl/base/internal/tsan_mutex_interface.h); this file does the same
// from the outside. Each entry point of the shared library is defined here
// again, so the dynamic linker binds every caller to this definition (the
// binary's own code, gRPC's and abseil's internal callers alike); the
// definition tells ThreadSanitizer what the call does to the mutex and
// forwards to abseil's own code (dlsym RTLD_NEXT). Between the pre and post
// annotation ThreadSanitizer ignores the thread's memory accesses, which
// covers the Condition functions abseil evaluates while it holds the lock.
//
// The names are abseil's mangled names with its inline namespace spelled in;
// a missing one aborts at the first call rather than losing the annotations.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

#define KUBETRAIN_STRINGIFY_INNER(x) #x
#define KUBETRAIN_STRINGIFY(x) KUBETRAIN_STRINGIFY_INNER(x)

// "absl::<inline namespace>::" as the Itanium ABI mangles the nested name.
std::string Mangled(const char* suffix) {
  const char* inline_namespace = KUBETRAIN_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return "_ZN4absl" + std::to_string(std::strlen(inline_namespace)) + inline_namespace + suffix;
}

void* Real(const char* suffix) {
  const std::string name = Mangled(suffix);
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: %s not found in libabsl_synchronization\n",
                 name.c_str());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn RealFn(const char* suffix) {
  return reinterpret_cast<Fn>(Real(suffix));
}

// abseil's entry points call one another (CondVar::WaitWithTimeout calls
// WaitWithDeadline): only the outermost call on a thread is annotated, or the
// inner one would release the mutex a second time.
thread_local int nesting = 0;

// True when this call is the thread's outermost one; the caller annotates.
class Outermost {
 public:
  Outermost() : outermost_(nesting++ == 0) {}
  ~Outermost() { --nesting; }
  explicit operator bool() const { return outermost_; }

 private:
  const bool outermost_;
};

constexpr unsigned kRead = __tsan_mutex_read_lock;
constexpr unsigned kTry = __tsan_mutex_try_lock;
constexpr unsigned kTryFailed = __tsan_mutex_try_lock_failed;

// The thread held the lock and holds it again after the call, which may have
// released it in between (Await, CondVar::Wait).
template <typename Call>
auto ReleasedDuring(absl::Mutex* mu, Call call) {
  __tsan_mutex_pre_unlock(mu, 0);
  auto result = call();
  __tsan_mutex_post_unlock(mu, 0);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return result;
}

}  // namespace

// These definitions stand in for abseil's; they acquire and release what
// their declarations say, through abseil's own code.
namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex4LockEv");
  Outermost outermost;
  if (!outermost) return real(this);
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::ReaderLock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  Outermost outermost;
  if (!outermost) return real(this);
  __tsan_mutex_pre_lock(this, kRead);
  real(this);
  __tsan_mutex_post_lock(this, kRead, 0);
}

bool Mutex::TryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  Outermost outermost;
  if (!outermost) return real(this);
  __tsan_mutex_pre_lock(this, kTry);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, kTry | (locked ? 0 : kTryFailed), 0);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  Outermost outermost;
  if (!outermost) return real(this);
  __tsan_mutex_pre_lock(this, kRead | kTry);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, kRead | kTry | (locked ? 0 : kTryFailed), 0);
  return locked;
}

void Mutex::Unlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex6UnlockEv");
  Outermost outermost;
  if (!outermost) return real(this);
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

void Mutex::ReaderUnlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  Outermost outermost;
  if (!outermost) return real(this);
  __tsan_mutex_pre_unlock(this, kRead);
  real(this);
  __tsan_mutex_post_unlock(this, kRead);
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real =
      RealFn<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  Outermost outermost;
  if (!outermost) return real(this, cond);
  __tsan_mutex_pre_lock(this, 0);
  real(this, cond);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real =
      RealFn<void (*)(Mutex*, const Condition&)>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Outermost outermost;
  if (!outermost) return real(this, cond);
  __tsan_mutex_pre_lock(this, kRead);
  real(this, cond);
  __tsan_mutex_post_lock(this, kRead, 0);
}

// The timed LockWhen forms hold the lock on return whatever they return.
bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outermost;
  if (!outermost) return real(this, cond, timeout);
  __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, timeout);
  __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outermost;
  if (!outermost) return real(this, cond, deadline);
  __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, deadline);
  __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outermost;
  if (!outermost) return real(this, cond, timeout);
  __tsan_mutex_pre_lock(this, kRead);
  const bool met = real(this, cond, timeout);
  __tsan_mutex_post_lock(this, kRead, 0);
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outermost;
  if (!outermost) return real(this, cond, deadline);
  __tsan_mutex_pre_lock(this, kRead);
  const bool met = real(this, cond, deadline);
  __tsan_mutex_post_lock(this, kRead, 0);
  return met;
}

void Mutex::Await(const Condition& cond) {
  static auto real = RealFn<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  Outermost outermost;
  if (!outermost) return real(this, cond);
  ReleasedDuring(this, [&] {
    real(this, cond);
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outermost;
  if (!outermost) return real(this, cond, timeout);
  return ReleasedDuring(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outermost;
  if (!outermost) return real(this, cond, deadline);
  return ReleasedDuring(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static auto real = RealFn<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Outermost outermost;
  if (!outermost) return real(this, mu);
  ReleasedDuring(mu, [&] {
    real(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Outermost outermost;
  if (!outermost) return real(this, mu, timeout);
  return ReleasedDuring(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, absl::Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Outermost outermost;
  if (!outermost) return real(this, mu, deadline);
  return ReleasedDuring(mu, [&] { return real(this, mu, deadline); });
}

ABSL_NAMESPACE_END
}  // namespace absl
