#include "CPromiseLock.h"

#if defined(__linux__) && !defined(__ANDROID__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CPK_TSAN 1
#endif
#endif
#if !defined(CPK_TSAN) && defined(__SANITIZE_THREAD__)
#define CPK_TSAN 1
#endif

#ifdef CPK_TSAN
#include <sanitizer/tsan_interface.h>
const int cpk_lock_is_annotated = 1;
#else
const int cpk_lock_is_annotated = 0;
#endif

static inline void cpk_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("isb sy");
#elif defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

void cpk_lock_contended(uint32_t *word) {
    // Critical sections are short (no user code runs under these locks): spin a little first.
    for (int i = 0; i < 64; i++) {
        cpk_cpu_relax();
        uint32_t expected = 0;
        if (__atomic_load_n(word, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            return;
        }
    }
    // Mark the lock "maybe someone sleeping" and sleep until it is released. Taking it in state
    // 2 may cost its next release a spurious wake, never a missed one. An interrupted or
    // spurious wake-up (EINTR, EAGAIN) only goes round the loop again.
    while (__atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE) != 0) {
        syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    }
}

void cpk_unlock_contended(uint32_t *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

// The words have no constructor (a zero-filled field of a Swift object), hence
// `__tsan_mutex_linker_init`; freeing the object frees what ThreadSanitizer knew of the word.
void cpk_lock_annotated(uint32_t *word) {
#ifdef CPK_TSAN
    __tsan_mutex_pre_lock(word, __tsan_mutex_linker_init);
    cpk_lock_plain(word);
    __tsan_mutex_post_lock(word, __tsan_mutex_linker_init, 0);
#else
    cpk_lock_plain(word);
#endif
}

void cpk_unlock_annotated(uint32_t *word) {
#ifdef CPK_TSAN
    __tsan_mutex_pre_unlock(word, 0);
    cpk_unlock_plain(word);
    __tsan_mutex_post_unlock(word, 0);
#else
    cpk_unlock_plain(word);
#endif
}
#endif

intptr_t cpk_counter_add(intptr_t *word, intptr_t delta) {
    return __atomic_add_fetch(word, delta, __ATOMIC_ACQ_REL);
}

static _Thread_local cpk_running_body cpk_this_thread_body;

cpk_running_body *cpk_running_body_record(void) {
    return &cpk_this_thread_body;
}
