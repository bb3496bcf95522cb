// The CPU emulator's runtime interface, included (through prelude_cpu.h) by every emulated
// kernel. The machinery itself (threads, barriers, shared memory) is in
// emulator_runtime.cpp, compiled once and linked, so that each kernel compiles quickly.
//
// The emulator runs a kernel body over a launch grid with the threads of a threadgroup as
// real concurrent std::threads, real barriers, SIMD groups of 32 lanes that exchange values
// through shared scratch, and per-threadgroup shared memory. It is strict on purpose, so that
// a kernel that would misbehave on a GPU fails here:
// - every barrier and SIMD-group function must be reached by all threads of the threadgroup
//   (SIMD group) at the same point; a thread that leaves the body while others wait, or
//   threads waiting at different points, is reported, never silently released;
// - threadgroup memory is poisoned (all bits set: NaN for floats) before every threadgroup
//   and capped at 32 KiB (Metal's limit), so reading before writing and overflow show;
// - all synchronisation goes through one mutex per threadgroup, so ThreadSanitizer sees every
//   happens-before edge the kernel is entitled to and reports the accesses that lack one.
#ifndef FC_EMULATOR_RUNTIME_H
#define FC_EMULATOR_RUNTIME_H

#include <cstddef>
#include <cstdint>

namespace fc_emu {

constexpr unsigned kSimdWidth = 32;

enum SyncKind : int {
  kBarrier = 1,
  kExit,
  kSimdBarrier,
  kSimdSum,
  kSimdMax,
  kSimdMin,
  kSimdPrefixSum,
  kSimdShuffle,
  kSimdShuffleXor,
  kSimdBroadcast,
};

struct uint3 {
  unsigned x, y, z;
};

class Team;

// What the body sees as `fc_ctx`: this thread's ids, and the way to its threadgroup.
struct Thread {
  uint3 tid, tg_id, tg_size, num_tgs, gid;
  unsigned index = 0, lane = 0, simd_id = 0, num_simds = 0, threads = 0;
  Team* team = nullptr;
  size_t arena_offset = 0;
  unsigned phase = 0;

  void barrier();
  void simd_barrier();
  void* shared_bytes(size_t size, size_t align);
  // Every lane publishes `size` bytes; after the SIMD group meets, `out` holds all 32 values.
  void exchange_bytes(const void* value, size_t size, int kind, void* out);
  [[noreturn]] void fail(const char* message);

  template <class U, size_t N>
  U (&shared())[N] {
    return *static_cast<U(*)[N]>(shared_bytes(sizeof(U) * N, alignof(U)));
  }
  template <class U>
  void exchange(U value, int kind, U (&out)[kSimdWidth]) {
    static_assert(sizeof(U) <= 8, "SIMD-group values are at most 64 bits");
    exchange_bytes(&value, sizeof(U), kind, out);
  }
};

using Entry = void (*)(Thread&, void* const* args);

// Runs `entry(thread, args)` for every thread of the grid. dims = grid (threads) x, y, z, then
// threadgroup x, y, z. Returns 0, or 1 with a message in `err`.
extern "C" int fc_emu_launch(const long* dims, int teams, char* err, long errlen, Entry entry,
                             void* const* args);

template <class U>
U simd_sum(Thread& t, U x) {
  U v[kSimdWidth];
  t.exchange(x, kSimdSum, v);
  U s = v[0];
  for (unsigned i = 1; i < kSimdWidth; ++i) s += v[i];
  return s;
}

template <class U>
U simd_max(Thread& t, U x) {
  U v[kSimdWidth];
  t.exchange(x, kSimdMax, v);
  U s = v[0];
  for (unsigned i = 1; i < kSimdWidth; ++i) s = v[i] > s ? v[i] : s;
  return s;
}

template <class U>
U simd_min(Thread& t, U x) {
  U v[kSimdWidth];
  t.exchange(x, kSimdMin, v);
  U s = v[0];
  for (unsigned i = 1; i < kSimdWidth; ++i) s = v[i] < s ? v[i] : s;
  return s;
}

template <class U>
U simd_prefix_exclusive_sum(Thread& t, U x) {
  U v[kSimdWidth];
  t.exchange(x, kSimdPrefixSum, v);
  U s = U(0);
  for (unsigned i = 0; i < t.lane; ++i) s += v[i];
  return s;
}

inline unsigned checked_lane(Thread& t, long lane, const char* what) {
  if (lane < 0 || lane >= static_cast<long>(kSimdWidth)) t.fail(what);
  return static_cast<unsigned>(lane);
}

template <class U>
U simd_shuffle(Thread& t, U x, long lane) {
  U v[kSimdWidth];
  t.exchange(x, kSimdShuffle, v);
  return v[checked_lane(t, lane, "FC_SIMD_SHUFFLE: lane out of range 0..31")];
}

template <class U>
U simd_shuffle_xor(Thread& t, U x, long mask) {
  U v[kSimdWidth];
  t.exchange(x, kSimdShuffleXor, v);
  const long lane = static_cast<long>(t.lane) ^ mask;
  return v[checked_lane(t, lane, "FC_SIMD_SHUFFLE_XOR: lane out of range 0..31")];
}

template <class U>
U simd_broadcast(Thread& t, U x, long lane) {
  U v[kSimdWidth];
  t.exchange(x, kSimdBroadcast, v);
  return v[checked_lane(t, lane, "FC_SIMD_BROADCAST: lane out of range 0..31")];
}

template <class U>
U atomic_add(U* p, U v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

inline float atomic_add(float* p, float v) {
  uint32_t* bits = reinterpret_cast<uint32_t*>(p);
  uint32_t expected = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    float old;
    __builtin_memcpy(&old, &expected, sizeof old);
    const float sum = old + v;
    uint32_t desired;
    __builtin_memcpy(&desired, &sum, sizeof desired);
    if (__atomic_compare_exchange_n(bits, &expected, desired, true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      return old;
    }
  }
}

template <class U>
U atomic_max(U* p, U v) {
  U old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v &&
         !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

}  // namespace fc_emu

#endif  // FC_EMULATOR_RUNTIME_H
