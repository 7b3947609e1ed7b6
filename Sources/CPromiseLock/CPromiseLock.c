#include "CPromiseLock.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline void cpk_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
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
    // 2 may cost its next release a spurious wake, never a missed one.
    while (__atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE) != 0) {
        syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    }
}

void cpk_unlock_contended(uint32_t *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
#endif
