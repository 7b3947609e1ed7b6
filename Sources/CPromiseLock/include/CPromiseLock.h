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
// exchange with release ordering, also on the contended paths, so ThreadSanitizer sees the
// happens-before edges a mutex gives. When the package is built with ThreadSanitizer, locking
// also goes through functions that annotate the word as a mutex (so that lock-order inversions
// are reported as they are for `pthread_mutex_t`).
#ifndef CPROMISELOCK_H
#define CPROMISELOCK_H

#include <stdint.h>

#if defined(__linux__) && !defined(__ANDROID__)

#ifdef __cplusplus
extern "C" {
#endif

/// Nonzero when the package was built with ThreadSanitizer (set by CPromiseLock.c).
extern const int cpk_lock_is_annotated;

/// Sleeps until the lock can be taken, then takes it (the contended path of `cpk_lock`).
void cpk_lock_contended(uint32_t *word);

/// Wakes one thread sleeping on the lock (the contended path of `cpk_unlock`).
void cpk_unlock_contended(uint32_t *word);

/// `cpk_lock` and `cpk_unlock` with ThreadSanitizer's mutex annotations around them.
void cpk_lock_annotated(uint32_t *word);
void cpk_unlock_annotated(uint32_t *word);

/// Takes the lock (without annotations).
static inline __attribute__((always_inline)) void cpk_lock_plain(uint32_t *word) {
    uint32_t expected = 0;
    if (__builtin_expect(
            __atomic_compare_exchange_n(word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED), 1)) {
        return;
    }
    cpk_lock_contended(word);
}

/// Releases the lock (without annotations); only by the thread that holds it.
static inline __attribute__((always_inline)) void cpk_unlock_plain(uint32_t *word) {
    if (__builtin_expect(__atomic_exchange_n(word, 0, __ATOMIC_RELEASE) == 2, 0)) {
        cpk_unlock_contended(word);
    }
}

/// Takes the lock.
static inline __attribute__((always_inline)) void cpk_lock(uint32_t *word) {
    if (__builtin_expect(cpk_lock_is_annotated, 0)) {
        cpk_lock_annotated(word);
        return;
    }
    cpk_lock_plain(word);
}

/// Releases the lock; only by the thread that holds it.
static inline __attribute__((always_inline)) void cpk_unlock(uint32_t *word) {
    if (__builtin_expect(cpk_lock_is_annotated, 0)) {
        cpk_unlock_annotated(word);
        return;
    }
    cpk_unlock_plain(word);
}

/// The word's state (0, 1 or 2), read atomically; for tests.
static inline uint32_t cpk_lock_state(uint32_t *word) {
    return __atomic_load_n(word, __ATOMIC_RELAXED);
}

#ifdef __cplusplus
}
#endif

#endif

// A counter word updated atomically (every platform): the handle count of a cancel storage,
// which the last of a chain's promises decrements to zero without taking the chain's lock.
// A call rather than an inline function, so that ThreadSanitizer sees every update.
#ifdef __cplusplus
extern "C" {
#endif

/// Adds `delta` to `*word` with acquire-release ordering and returns the new value.
intptr_t cpk_counter_add(intptr_t *word, intptr_t delta);

#ifdef __cplusplus
}
#endif

// The body a cancellable chain runs on this thread (every platform): PromiseCore marks a step's
// body while it runs, so that `CancellationToken.current` can find the step. A thread-local
// record of four words, read and written through the pointer below; the previous record is
// kept by the caller and put back when the body returns (bodies nest when one runs another
// synchronously).
#ifdef __cplusplus
extern "C" {
#endif

/// What runs on a thread: the step's attachment and the key it knows the step by, the step
/// itself, and an object a reader keeps with the body while it runs (the token it read, so that
/// the next read is quick); all zero when no marked body runs. Who holds `owner` and `step` is
/// said where a body is marked; `kept` is retained by the record.
typedef struct cpk_running_body {
    const void *owner;
    const void *step;
    const void *kept;
    uint32_t key;
} cpk_running_body;

/// This thread's record.
cpk_running_body *cpk_running_body_record(void);

#ifdef __cplusplus
}
#endif

#endif
