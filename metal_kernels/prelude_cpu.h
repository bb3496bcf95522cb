// FlashChat kernel dialect, CPU prelude: the emulator compiles a kernel body against it.
//
// The body runs as a plain C++ function, once per thread; `fc_ctx` is that thread's context
// (emulator_runtime.h). Types follow MLX's names for the Metal signature: float16_t is
// _Float16, bfloat16_t a 16-bit struct that converts to and from float (round to nearest
// even), so a body that does arithmetic on bf16 values directly fails to compile here, as
// the dialect asks (convert with FC_TO_FLOAT / FC_CAST).
#ifndef FC_PRELUDE_CPU_H
#define FC_PRELUDE_CPU_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "emulator_runtime.h"

#define FC_BACKEND_CPU 1

typedef unsigned int uint;
typedef _Float16 float16_t;

struct bfloat16_t {
  uint16_t bits;
  bfloat16_t() = default;
  bfloat16_t(float f) {  // NOLINT: implicit, like the GPU types
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
    } else {
      bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
  explicit operator float() const {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

#define FC_TID_X (fc_ctx.tid.x)
#define FC_TID_Y (fc_ctx.tid.y)
#define FC_TID_Z (fc_ctx.tid.z)
#define FC_TG_ID_X (fc_ctx.tg_id.x)
#define FC_TG_ID_Y (fc_ctx.tg_id.y)
#define FC_TG_ID_Z (fc_ctx.tg_id.z)
#define FC_GID_X (fc_ctx.gid.x)
#define FC_GID_Y (fc_ctx.gid.y)
#define FC_GID_Z (fc_ctx.gid.z)
#define FC_TG_SIZE_X (fc_ctx.tg_size.x)
#define FC_TG_SIZE_Y (fc_ctx.tg_size.y)
#define FC_TG_SIZE_Z (fc_ctx.tg_size.z)
#define FC_NUM_TG_X (fc_ctx.num_tgs.x)
#define FC_NUM_TG_Y (fc_ctx.num_tgs.y)
#define FC_NUM_TG_Z (fc_ctx.num_tgs.z)
#define FC_THREAD_INDEX (fc_ctx.index)
#define FC_THREADS_PER_TG (fc_ctx.threads)
#define FC_SIMD_LANE (fc_ctx.lane)
#define FC_SIMD_ID (fc_ctx.simd_id)
#define FC_NUM_SIMDS (fc_ctx.num_simds)
#define FC_SIMD_WIDTH 32
#define FC_SIMD_WIDTH_LIVE (fc_emu::kSimdWidth)

#define FC_THREADGROUP(type, name, count) type(&name)[count] = fc_ctx.shared<type, (count)>()
#define FC_BARRIER() fc_ctx.barrier()
#define FC_BARRIER_DEVICE() fc_ctx.barrier()
#define FC_SIMD_BARRIER() fc_ctx.simd_barrier()

#define FC_SIMD_SUM(x) fc_emu::simd_sum(fc_ctx, x)
#define FC_SIMD_MAX(x) fc_emu::simd_max(fc_ctx, x)
#define FC_SIMD_MIN(x) fc_emu::simd_min(fc_ctx, x)
#define FC_SIMD_PREFIX_EXCLUSIVE_SUM(x) fc_emu::simd_prefix_exclusive_sum(fc_ctx, x)
#define FC_SIMD_SHUFFLE(x, lane) fc_emu::simd_shuffle(fc_ctx, x, static_cast<long>(lane))
#define FC_SIMD_SHUFFLE_XOR(x, mask) fc_emu::simd_shuffle_xor(fc_ctx, x, static_cast<long>(mask))
#define FC_SIMD_BROADCAST(x, lane) fc_emu::simd_broadcast(fc_ctx, x, static_cast<long>(lane))

#define FC_EXP(x) std::exp(static_cast<float>(x))
#define FC_LOG(x) std::log(static_cast<float>(x))
#define FC_SQRT(x) std::sqrt(static_cast<float>(x))
#define FC_FMAX(a, b) std::fmax(static_cast<float>(a), static_cast<float>(b))
#define FC_FMIN(a, b) std::fmin(static_cast<float>(a), static_cast<float>(b))
#define FC_MAX(a, b) std::max(a, b)
#define FC_MIN(a, b) std::min(a, b)
#define FC_INFINITY INFINITY
#define FC_INT_MAX 2147483647
#define FC_TO_FLOAT(x) static_cast<float>(x)
#define FC_CAST(type, x) static_cast<type>(x)

#define FC_THREADGROUP_ATOMIC_INT(name, count) FC_THREADGROUP(int, name, count)
#define FC_ATOMIC_ADD(ptr, v) fc_emu::atomic_add(ptr, v)
#define FC_ATOMIC_MAX(ptr, v) fc_emu::atomic_max(ptr, v)
#define FC_ATOMIC_LOAD(ptr) __atomic_load_n(ptr, __ATOMIC_RELAXED)
#define FC_ATOMIC_STORE(ptr, v) __atomic_store_n(ptr, v, __ATOMIC_RELAXED)

#endif  // FC_PRELUDE_CPU_H
