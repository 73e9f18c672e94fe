// Makes Debian's absl::Mutex, absl::CondVar (and so absl::Notification and gRPC's own locks, which
// wrap them) visible to ThreadSanitizer. Linked into every executable of a CDCVIEW_SANITIZE=thread
// build, nothing else.
//
// Why: Debian's libabsl_synchronization is not built with -fsanitize=thread, so its lock and unlock
// are atomics and futex calls TSan never sees. Without this, every member guarded by an absl::Mutex
// and touched by two threads would be reported as a race. Here each of the library's locking entry
// points is defined again in the executable, which the dynamic linker prefers over the library
// (also for calls from libgrpc and from libabsl itself); each calls the library's definition
// (found with dlsym(RTLD_NEXT)) between the __tsan_mutex_* annotations that abseil itself emits
// when it is compiled with TSan. The executables export these definitions
// (and only these: see CMakeLists.txt).
//
// Thread-safety: the functions are called concurrently, like the ones they stand in for; each
// resolves its target once (a function-local static).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if !ABSL_OPTION_USE_INLINE_NAMESPACE
#error "tsan_absl_mutex.cc spells abseil's symbols with its inline namespace; this abseil has none"
#endif

namespace {

#define CDCVIEW_STR2(x) #x
#define CDCVIEW_STR(x) CDCVIEW_STR2(x)

// The library's definition of absl::<inline namespace>::<tail> (an Itanium-mangled name's rest).
void* Real(const char* tail) {
  const std::string ns = CDCVIEW_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = "_ZN4absl" + std::to_string(ns.size()) + ns + tail;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found in the abseil libraries\n", name.c_str());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn Resolve(const char* tail) {
  return reinterpret_cast<Fn>(Real(tail));
}

// absl::Mutex's first member is its lock word; kMuWriter (0x0008 in mutex.cc) marks a writer.
// CondVar::Wait and Mutex::Await give up whichever mode the caller holds.
unsigned HeldMode(const absl::Mutex* mu) {
  const auto* word = reinterpret_cast<const std::atomic<intptr_t>*>(mu);
  return (word->load(std::memory_order_relaxed) & 0x0008) != 0 ? 0 : __tsan_mutex_read_lock;
}

// Around a call that releases `mu` and takes it again before it returns.
class Released {
 public:
  explicit Released(absl::Mutex* mu) : mu_(mu), mode_(HeldMode(mu)) {
    __tsan_mutex_pre_unlock(mu_, mode_);
    __tsan_mutex_post_unlock(mu_, mode_);
    __tsan_mutex_pre_lock(mu_, mode_);
  }
  ~Released() { __tsan_mutex_post_lock(mu_, mode_, 0); }
  Released(const Released&) = delete;
  Released& operator=(const Released&) = delete;

 private:
  absl::Mutex* mu_;
  unsigned mode_;
};

using Plain = void (*)(absl::Mutex*);
using Try = bool (*)(absl::Mutex*);
using When = void (*)(absl::Mutex*, const absl::Condition&);
using WhenDeadline = bool (*)(absl::Mutex*, const absl::Condition&, absl::Time);

void Lock(absl::Mutex* mu, unsigned mode, Plain real) {
  __tsan_mutex_pre_lock(mu, mode);
  real(mu);
  __tsan_mutex_post_lock(mu, mode, 0);
}

void Unlock(absl::Mutex* mu, unsigned mode, Plain real) {
  __tsan_mutex_pre_unlock(mu, mode);
  real(mu);
  __tsan_mutex_post_unlock(mu, mode);
}

bool TryLock(absl::Mutex* mu, unsigned mode, Try real) {
  __tsan_mutex_pre_lock(mu, mode | __tsan_mutex_try_lock);
  const bool locked = real(mu);
  __tsan_mutex_post_lock(
      mu, mode | __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

template <typename Fn, typename... Args>
auto LockWhen(absl::Mutex* mu, unsigned mode, Fn real, const Args&... args) {
  __tsan_mutex_pre_lock(mu, mode);
  if constexpr (std::is_void_v<decltype(real(mu, args...))>) {
    real(mu, args...);
    __tsan_mutex_post_lock(mu, mode, 0);
  } else {
    const auto result = real(mu, args...);  // the lock is held whatever the result
    __tsan_mutex_post_lock(mu, mode, 0);
    return result;
  }
}

}  // namespace

namespace absl {

// Not here: the *WithTimeout variants. Debian's abseil implements each as a call of its
// *WithDeadline twin through the dynamic linker, which lands in the definitions below.

Mutex::~Mutex() {
  static const auto real = Resolve<Plain>("5MutexD2Ev");
  __tsan_mutex_destroy(this, 0);
  real(this);
}

void Mutex::Lock() {
  static const auto real = Resolve<Plain>("5Mutex4LockEv");
  ::Lock(this, 0, real);
}
void Mutex::ReaderLock() {
  static const auto real = Resolve<Plain>("5Mutex10ReaderLockEv");
  ::Lock(this, __tsan_mutex_read_lock, real);
}
void Mutex::Unlock() {
  static const auto real = Resolve<Plain>("5Mutex6UnlockEv");
  ::Unlock(this, 0, real);
}
void Mutex::ReaderUnlock() {
  static const auto real = Resolve<Plain>("5Mutex12ReaderUnlockEv");
  ::Unlock(this, __tsan_mutex_read_lock, real);
}
bool Mutex::TryLock() {
  static const auto real = Resolve<Try>("5Mutex7TryLockEv");
  return ::TryLock(this, 0, real);
}
bool Mutex::ReaderTryLock() {
  static const auto real = Resolve<Try>("5Mutex13ReaderTryLockEv");
  return ::TryLock(this, __tsan_mutex_read_lock, real);
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real = Resolve<When>("5Mutex8LockWhenERKNS0_9ConditionE");
  ::LockWhen(this, 0, real, cond);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  static const auto real = Resolve<When>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  ::LockWhen(this, __tsan_mutex_read_lock, real, cond);
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real =
      Resolve<WhenDeadline>("5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return ::LockWhen(this, 0, real, cond, deadline);
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real =
      Resolve<WhenDeadline>("5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return ::LockWhen(this, __tsan_mutex_read_lock, real, cond, deadline);
}

void Mutex::Await(const Condition& cond) {
  static const auto real = Resolve<When>("5Mutex5AwaitERKNS0_9ConditionE");
  Released released(this);
  real(this, cond);
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real =
      Resolve<WhenDeadline>("5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Released released(this);
  return real(this, cond, deadline);
}

void CondVar::Wait(Mutex* mu) {
  static const auto real = Resolve<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Released released(mu);
  real(this, mu);
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real = Resolve<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Released released(mu);
  return real(this, mu, deadline);
}

}  // namespace absl
