// FlashChat kernel dialect, CUDA prelude: passed as `header` to mx.fast.cuda_kernel.
//
// MLX places it after its own device headers (cuda_fp16/cuda_bf16 types, int32_t, ...) and
// before the generated `__global__` function. SIMD groups are warps (32 lanes, formed from
// the linear thread index, as Metal forms SIMD groups); SIMD-group functions are warp
// shuffles over the full mask, so, as in the dialect's rule, all 32 lanes must take part.
#ifndef FC_PRELUDE_CUDA_H
#define FC_PRELUDE_CUDA_H

#define FC_BACKEND_CUDA 1

typedef unsigned int uint;

#define FC_TID_X (threadIdx.x)
#define FC_TID_Y (threadIdx.y)
#define FC_TID_Z (threadIdx.z)
#define FC_TG_ID_X (blockIdx.x)
#define FC_TG_ID_Y (blockIdx.y)
#define FC_TG_ID_Z (blockIdx.z)
#define FC_GID_X (blockIdx.x * blockDim.x + threadIdx.x)
#define FC_GID_Y (blockIdx.y * blockDim.y + threadIdx.y)
#define FC_GID_Z (blockIdx.z * blockDim.z + threadIdx.z)
#define FC_TG_SIZE_X (blockDim.x)
#define FC_TG_SIZE_Y (blockDim.y)
#define FC_TG_SIZE_Z (blockDim.z)
#define FC_NUM_TG_X (gridDim.x)
#define FC_NUM_TG_Y (gridDim.y)
#define FC_NUM_TG_Z (gridDim.z)
#define FC_THREAD_INDEX (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))
#define FC_THREADS_PER_TG (blockDim.x * blockDim.y * blockDim.z)
#define FC_SIMD_LANE (FC_THREAD_INDEX & 31u)
#define FC_SIMD_ID (FC_THREAD_INDEX >> 5)
#define FC_NUM_SIMDS ((FC_THREADS_PER_TG + 31u) >> 5)
#define FC_SIMD_WIDTH 32
#define FC_SIMD_WIDTH_LIVE (warpSize)

#define FC_THREADGROUP(type, name, count) __shared__ type name[count]
#define FC_BARRIER() __syncthreads()
#define FC_BARRIER_DEVICE() __syncthreads()
#define FC_SIMD_BARRIER() __syncwarp()

#define FC_FULL_MASK 0xffffffffu

template <typename U>
__device__ __forceinline__ U fc_simd_sum(U x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(FC_FULL_MASK, x, offset);
  return x;
}

template <typename U>
__device__ __forceinline__ U fc_simd_max(U x) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const U other = __shfl_xor_sync(FC_FULL_MASK, x, offset);
    x = other > x ? other : x;
  }
  return x;
}

template <typename U>
__device__ __forceinline__ U fc_simd_min(U x) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const U other = __shfl_xor_sync(FC_FULL_MASK, x, offset);
    x = other < x ? other : x;
  }
  return x;
}

// Exclusive scan: an inclusive scan shifted up one lane (not inclusive - x, which would round
// differently for floats).
template <typename U>
__device__ __forceinline__ U fc_simd_prefix_exclusive_sum(U x) {
  const unsigned lane = FC_SIMD_LANE;
  U inclusive = x;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const U other = __shfl_up_sync(FC_FULL_MASK, inclusive, offset);
    if (lane >= static_cast<unsigned>(offset)) inclusive += other;
  }
  const U shifted = __shfl_up_sync(FC_FULL_MASK, inclusive, 1);
  return lane == 0 ? U(0) : shifted;
}

// Own integer max/min: the body lands inside MLX's namespace, where a plain `max` could
// resolve to something else.
template <typename U>
__device__ __forceinline__ U fc_max(U a, U b) {
  return a > b ? a : b;
}

template <typename U>
__device__ __forceinline__ U fc_min(U a, U b) {
  return a < b ? a : b;
}

#define FC_SIMD_SUM(x) fc_simd_sum(x)
#define FC_SIMD_MAX(x) fc_simd_max(x)
#define FC_SIMD_MIN(x) fc_simd_min(x)
#define FC_SIMD_PREFIX_EXCLUSIVE_SUM(x) fc_simd_prefix_exclusive_sum(x)
#define FC_SIMD_SHUFFLE(x, lane) __shfl_sync(FC_FULL_MASK, x, static_cast<int>(lane))
#define FC_SIMD_SHUFFLE_XOR(x, mask) __shfl_xor_sync(FC_FULL_MASK, x, static_cast<int>(mask))
#define FC_SIMD_BROADCAST(x, lane) __shfl_sync(FC_FULL_MASK, x, static_cast<int>(lane))

#define FC_EXP(x) expf(x)
#define FC_LOG(x) logf(x)
#define FC_SQRT(x) sqrtf(x)
#define FC_FMAX(a, b) fmaxf(a, b)
#define FC_FMIN(a, b) fminf(a, b)
#define FC_MAX(a, b) fc_max(a, b)
#define FC_MIN(a, b) fc_min(a, b)
#define FC_INFINITY (__int_as_float(0x7f800000))
#define FC_INT_MAX 2147483647
#define FC_TO_FLOAT(x) static_cast<float>(x)
#define FC_CAST(type, x) static_cast<type>(x)

#define FC_THREADGROUP_ATOMIC_INT(name, count) __shared__ int name[count]
#define FC_ATOMIC_ADD(ptr, v) atomicAdd(ptr, v)
#define FC_ATOMIC_MAX(ptr, v) atomicMax(ptr, v)
#define FC_ATOMIC_LOAD(ptr) atomicAdd(ptr, 0)
#define FC_ATOMIC_STORE(ptr, v) atomicExch(ptr, v)

#endif  // FC_PRELUDE_CUDA_H
