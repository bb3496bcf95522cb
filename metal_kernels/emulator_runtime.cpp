// The CPU emulator's machinery: teams of threads, barriers, SIMD-group exchanges and
// threadgroup memory (the interface and its rules are in emulator_runtime.h).
#include "emulator_runtime.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fc_emu {
namespace {

constexpr size_t kThreadgroupMemory = 32768;  // Metal's per-threadgroup limit
constexpr long kMaxThreadsPerGroup = 1024;

const char* sync_name(int kind) {
  switch (kind) {
    case kBarrier: return "FC_BARRIER";
    case kExit: return "the end of the kernel";
    case kSimdBarrier: return "FC_SIMD_BARRIER";
    case kSimdSum: return "FC_SIMD_SUM";
    case kSimdMax: return "FC_SIMD_MAX";
    case kSimdMin: return "FC_SIMD_MIN";
    case kSimdPrefixSum: return "FC_SIMD_PREFIX_EXCLUSIVE_SUM";
    case kSimdShuffle: return "FC_SIMD_SHUFFLE";
    case kSimdShuffleXor: return "FC_SIMD_SHUFFLE_XOR";
    case kSimdBroadcast: return "FC_SIMD_BROADCAST";
    default: return "?";
  }
}

struct Abort {};  // unwinds a thread's body once its launch has failed

// State shared by all teams of one launch.
struct LaunchState {
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string error;

  void fail(const std::string& message) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.empty()) error = message;
    failed.store(true);
  }
};

// One meeting point: the threadgroup's barrier, or one SIMD group's.
struct Rendezvous {
  int arrived = 0;
  int kind = 0;
  int other_kind = 0;
  uint64_t generation = 0;
};

}  // namespace

// The threads that run one threadgroup at a time (a launch may run several teams at once).
class Team {
 public:
  Team(unsigned threads, LaunchState* launch)
      : n_(threads),
        simds_(threads / kSimdWidth),
        launch_(launch),
        simd_(simds_),
        simd_cv_(simds_),
        arena_(new std::max_align_t[kThreadgroupMemory / sizeof(std::max_align_t)]),
        scratch_(new unsigned char[simds_ * 2 * kSimdWidth * 8]) {
    for (auto& cv : simd_cv_) cv.reset(new std::condition_variable());
    poison();
  }

  unsigned char* arena() { return reinterpret_cast<unsigned char*>(arena_.get()); }
  unsigned char* scratch(unsigned simd, unsigned phase) {
    return scratch_.get() + (simd * 2 + phase) * kSimdWidth * 8;
  }

  void set_group(const uint3& g) {
    std::lock_guard<std::mutex> lock(mu_);
    group_ = g;
  }

  void barrier(int kind) { sync(tg_, tg_cv_, static_cast<int>(n_), kind); }
  void simd_sync(unsigned simd, int kind) {
    sync(simd_[simd], *simd_cv_[simd], static_cast<int>(kSimdWidth), kind);
  }

  void fail(const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_locked(where() + ": " + message);
  }

 private:
  void poison() { std::memset(arena(), 0xFF, kThreadgroupMemory); }

  std::string where() const {
    char buf[96];
    std::snprintf(buf, sizeof buf, "threadgroup (%u, %u, %u)", group_.x, group_.y, group_.z);
    return buf;
  }

  void wake_all() {
    tg_cv_.notify_all();
    for (auto& cv : simd_cv_) cv->notify_all();
  }

  void fail_locked(const std::string& message) {
    if (!failed_) launch_->fail(message);
    failed_ = true;
    wake_all();
  }

  // Blocks until `expected` threads have arrived at `r`. Everything between two meetings is
  // ordered by the mutex, which is all the memory ordering a barrier promises.
  void sync(Rendezvous& r, std::condition_variable& cv, int expected, int kind) {
    std::unique_lock<std::mutex> lock(mu_);
    if (failed_ || launch_->failed.load()) {
      if (!failed_) {
        failed_ = true;
        wake_all();
      }
      throw Abort{};
    }
    if (r.arrived == 0) {
      r.kind = kind;
      r.other_kind = 0;
    } else if (r.kind != kind) {
      r.other_kind = kind;
    }
    r.arrived += 1;
    blocked_ += 1;
    if (r.arrived == expected) {
      blocked_ -= expected;
      r.arrived = 0;
      r.generation += 1;
      if (r.other_kind != 0) {
        fail_locked(where() + ": threads met at different points (" + sync_name(r.kind) +
                    " and " + sync_name(r.other_kind) +
                    "): every barrier and SIMD-group function must be reached by all threads "
                    "of the threadgroup (SIMD group), in uniform control flow");
      } else if (kind == kExit) {
        poison();  // the next threadgroup starts with garbage, as on a GPU
      }
      cv.notify_all();
      if (failed_) throw Abort{};
      return;
    }
    if (blocked_ == static_cast<int>(n_)) {
      fail_locked(where() + ": deadlock: every thread waits at a barrier or SIMD-group "
                  "function that cannot complete (one at " + sync_name(kind) +
                  "): a barrier or SIMD-group function in divergent control flow");
      throw Abort{};
    }
    const uint64_t generation = r.generation;
    cv.wait(lock, [&] { return r.generation != generation || failed_; });
    if (failed_) throw Abort{};
  }

  const unsigned n_, simds_;
  LaunchState* launch_;
  std::mutex mu_;
  Rendezvous tg_;
  std::condition_variable tg_cv_;
  std::vector<Rendezvous> simd_;
  std::vector<std::unique_ptr<std::condition_variable>> simd_cv_;
  std::unique_ptr<std::max_align_t[]> arena_;
  std::unique_ptr<unsigned char[]> scratch_;
  int blocked_ = 0;
  bool failed_ = false;
  uint3 group_{0, 0, 0};
};

void Thread::barrier() { team->barrier(kBarrier); }
void Thread::simd_barrier() { team->simd_sync(simd_id, kSimdBarrier); }

void Thread::fail(const char* message) {
  team->fail(message);
  throw Abort{};
}

void* Thread::shared_bytes(size_t size, size_t align) {
  if (align < 16) align = 16;
  const size_t offset = (arena_offset + align - 1) / align * align;
  if (offset + size > kThreadgroupMemory) {
    fail("threadgroup memory over 32 KiB (Metal's limit per threadgroup)");
  }
  arena_offset = offset + size;
  return team->arena() + offset;
}

// Two scratch rows used alternately make one meeting per exchange enough: a lane can only
// overwrite a row two exchanges later, after every lane has passed the exchange in between
// (and so has finished reading the row).
void Thread::exchange_bytes(const void* value, size_t size, int kind, void* out) {
  unsigned char* row = team->scratch(simd_id, phase);
  std::memcpy(row + lane * 8, value, size);
  team->simd_sync(simd_id, kind);
  for (unsigned i = 0; i < kSimdWidth; ++i) {
    std::memcpy(static_cast<unsigned char*>(out) + i * size, row + i * 8, size);
  }
  phase ^= 1u;
}

extern "C" int fc_emu_launch(const long* dims, int teams, char* err, long errlen, Entry entry,
                             void* const* args) {
  const long gx = dims[0], gy = dims[1], gz = dims[2], tx = dims[3], ty = dims[4], tz = dims[5];
  auto error = [&](const std::string& message) {
    std::snprintf(err, static_cast<size_t>(errlen), "%s", message.c_str());
    return 1;
  };
  if (tx <= 0 || ty <= 0 || tz <= 0 || gx <= 0 || gy <= 0 || gz <= 0) {
    return error("grid and threadgroup sizes must be positive");
  }
  const long threads = tx * ty * tz;
  if (threads % kSimdWidth != 0 || threads > kMaxThreadsPerGroup) {
    return error("threadgroup size must be a multiple of 32, at most 1024");
  }
  if (gx % tx || gy % ty || gz % tz) {
    return error("grid must be a whole number of threadgroups in every dimension");
  }
  const unsigned ngx = gx / tx, ngy = gy / ty, ngz = gz / tz;
  const unsigned long groups = static_cast<unsigned long>(ngx) * ngy * ngz;
  unsigned long wanted = teams < 1 ? 1 : static_cast<unsigned long>(teams);
  const unsigned nteams = static_cast<unsigned>(wanted > groups ? groups : wanted);
  LaunchState state;
  std::vector<std::unique_ptr<Team>> crews;
  for (unsigned i = 0; i < nteams; ++i) {
    crews.emplace_back(new Team(static_cast<unsigned>(threads), &state));
  }
  auto run = [&](unsigned team_index, unsigned index) {
    Team& team = *crews[team_index];
    for (unsigned long g = team_index; g < groups; g += nteams) {
      if (state.failed.load()) return;
      Thread t;
      t.team = &team;
      t.index = index;
      t.threads = static_cast<unsigned>(threads);
      t.tg_size = {static_cast<unsigned>(tx), static_cast<unsigned>(ty),
                   static_cast<unsigned>(tz)};
      t.num_tgs = {ngx, ngy, ngz};
      t.tid = {static_cast<unsigned>(index % tx), static_cast<unsigned>((index / tx) % ty),
               static_cast<unsigned>(index / (tx * ty))};
      t.tg_id = {static_cast<unsigned>(g % ngx), static_cast<unsigned>((g / ngx) % ngy),
                 static_cast<unsigned>(g / (static_cast<unsigned long>(ngx) * ngy))};
      t.gid = {t.tg_id.x * t.tg_size.x + t.tid.x, t.tg_id.y * t.tg_size.y + t.tid.y,
               t.tg_id.z * t.tg_size.z + t.tid.z};
      t.lane = index % kSimdWidth;
      t.simd_id = index / kSimdWidth;
      t.num_simds = static_cast<unsigned>(threads / kSimdWidth);
      if (index == 0) team.set_group(t.tg_id);
      try {
        entry(t, args);
        team.barrier(kExit);
      } catch (const Abort&) {
        return;
      } catch (const std::exception& e) {
        team.fail(e.what());
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(nteams * threads);
  for (unsigned team_index = 0; team_index < nteams; ++team_index) {
    for (unsigned i = 0; i < static_cast<unsigned>(threads); ++i) {
      pool.emplace_back(run, team_index, i);
    }
  }
  for (auto& th : pool) th.join();
  if (state.failed.load()) return error(state.error);
  return 0;
}

}  // namespace fc_emu
