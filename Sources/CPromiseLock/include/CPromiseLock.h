// The lock word of promises, cancel storages and tokens on Linux: a 32-bit futex lock.
//
// A promise must cost about one allocation and one lock, and its lock lives inside the
// object (see PromiseCore's Lock.swift). glibc's `pthread_mutex_t` takes 40 bytes of every
// promise and a call per lock and unlock; this lock is one word, and its uncontended paths are
// one atomic instruction each, inlined. Only the contended paths are calls (they spin briefly,
// then sleep on the futex).
//
// States: 0 unlocked; 1 locked, nobody sleeping; 2 locked, maybe someone sleeping. Every
// acquisition is an atomic read-modify-write with acquire ordering and every release an atomic
// exchange with release ordering, also on the contended paths, so ThreadSanitizer (which
// instruments this code) sees the happens-before edges a mutex gives.
#ifndef CPROMISELOCK_H
#define CPROMISELOCK_H

#include <stdint.h>

#if defined(__linux__)

/// Sleeps until the lock can be taken, then takes it (the contended path of `cpk_lock`).
void cpk_lock_contended(uint32_t *word);

/// Wakes one thread sleeping on the lock (the contended path of `cpk_unlock`).
void cpk_unlock_contended(uint32_t *word);

/// Takes the lock.
static inline __attribute__((always_inline)) void cpk_lock(uint32_t *word) {
    uint32_t expected = 0;
    if (__builtin_expect(
            __atomic_compare_exchange_n(word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED), 1)) {
        return;
    }
    cpk_lock_contended(word);
}

/// Releases the lock; only by the thread that holds it.
static inline __attribute__((always_inline)) void cpk_unlock(uint32_t *word) {
    if (__builtin_expect(__atomic_exchange_n(word, 0, __ATOMIC_RELEASE) == 2, 0)) {
        cpk_unlock_contended(word);
    }
}

#endif

#endif
