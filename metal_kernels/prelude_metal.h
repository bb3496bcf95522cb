// FlashChat kernel dialect, Metal prelude: passed as `header` to mx.fast.metal_kernel.
//
// Every macro is a Metal built-in and nothing more. The ids name the kernel attributes MLX
// adds to the generated signature (MLX adds an attribute when its name occurs in the body;
// the body only names macros, so the loader prepends a comment naming the attributes each
// kernel's signature declares). Attribute types are MLX's: uint for scalars, uint3 for
// vectors. Math macros take and return float; SIMD-group macros take float, int or uint.
#ifndef FC_PRELUDE_METAL_H
#define FC_PRELUDE_METAL_H

#include <metal_stdlib>

#define FC_BACKEND_METAL 1

// Thread and threadgroup ids.
#define FC_TID_X (thread_position_in_threadgroup.x)
#define FC_TID_Y (thread_position_in_threadgroup.y)
#define FC_TID_Z (thread_position_in_threadgroup.z)
#define FC_TG_ID_X (threadgroup_position_in_grid.x)
#define FC_TG_ID_Y (threadgroup_position_in_grid.y)
#define FC_TG_ID_Z (threadgroup_position_in_grid.z)
#define FC_GID_X (thread_position_in_grid.x)
#define FC_GID_Y (thread_position_in_grid.y)
#define FC_GID_Z (thread_position_in_grid.z)
#define FC_TG_SIZE_X (threads_per_threadgroup.x)
#define FC_TG_SIZE_Y (threads_per_threadgroup.y)
#define FC_TG_SIZE_Z (threads_per_threadgroup.z)
#define FC_NUM_TG_X (threadgroups_per_grid.x)
#define FC_NUM_TG_Y (threadgroups_per_grid.y)
#define FC_NUM_TG_Z (threadgroups_per_grid.z)
#define FC_THREAD_INDEX (thread_index_in_threadgroup)
#define FC_THREADS_PER_TG \
  (threads_per_threadgroup.x * threads_per_threadgroup.y * threads_per_threadgroup.z)
#define FC_SIMD_LANE (thread_index_in_simdgroup)
#define FC_SIMD_ID (simdgroup_index_in_threadgroup)
#define FC_NUM_SIMDS (simdgroups_per_threadgroup)
#define FC_SIMD_WIDTH 32
#define FC_SIMD_WIDTH_LIVE (threads_per_simdgroup)

// Threadgroup memory (declare at the top level of the body) and barriers.
#define FC_THREADGROUP(type, name, count) threadgroup type name[count]
#define FC_BARRIER() metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup)
#define FC_BARRIER_DEVICE() \
  metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup)
#define FC_SIMD_BARRIER() metal::simdgroup_barrier(metal::mem_flags::mem_threadgroup)

// SIMD-group functions (all 32 lanes, uniform control flow).
#define FC_SIMD_SUM(x) metal::simd_sum(x)
#define FC_SIMD_MAX(x) metal::simd_max(x)
#define FC_SIMD_MIN(x) metal::simd_min(x)
#define FC_SIMD_PREFIX_EXCLUSIVE_SUM(x) metal::simd_prefix_exclusive_sum(x)
#define FC_SIMD_SHUFFLE(x, lane) metal::simd_shuffle(x, static_cast<ushort>(lane))
#define FC_SIMD_SHUFFLE_XOR(x, mask) metal::simd_shuffle_xor(x, static_cast<ushort>(mask))
#define FC_SIMD_BROADCAST(x, lane) metal::simd_broadcast(x, static_cast<ushort>(lane))

// Math (float) and integer helpers.
#define FC_EXP(x) metal::exp(x)
#define FC_LOG(x) metal::log(x)
#define FC_SQRT(x) metal::sqrt(x)
#define FC_FMAX(a, b) metal::fmax(a, b)
#define FC_FMIN(a, b) metal::fmin(a, b)
#define FC_MAX(a, b) metal::max(a, b)
#define FC_MIN(a, b) metal::min(a, b)
#define FC_INFINITY (metal::numeric_limits<float>::infinity())
#define FC_INT_MAX 2147483647
#define FC_TO_FLOAT(x) static_cast<float>(x)
#define FC_CAST(type, x) static_cast<type>(x)

// Atomics (relaxed). Threadgroup: declare with FC_THREADGROUP_ATOMIC_INT; device: only on
// outputs declared atomic (MLX's atomic_outputs).
#define FC_THREADGROUP_ATOMIC_INT(name, count) threadgroup metal::atomic_int name[count]
#define FC_ATOMIC_ADD(ptr, v) metal::atomic_fetch_add_explicit(ptr, v, metal::memory_order_relaxed)
#define FC_ATOMIC_MAX(ptr, v) metal::atomic_fetch_max_explicit(ptr, v, metal::memory_order_relaxed)
#define FC_ATOMIC_LOAD(ptr) metal::atomic_load_explicit(ptr, metal::memory_order_relaxed)
#define FC_ATOMIC_STORE(ptr, v) metal::atomic_store_explicit(ptr, v, metal::memory_order_relaxed)

#endif  // FC_PRELUDE_METAL_H
