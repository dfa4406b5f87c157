// ws family: how its warpgroups coordinate without __syncthreads: named barriers (the
// consumers' ping-pong turns and the O epilogue's), and setmaxnreg, which moves registers
// from the producer warpgroup to the consumers.
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace ws {

constexpr int kWarpgroupThreads = 128;
constexpr int kWarpgroupRows = 64;  // wgmma M

// Named barriers 1.. (0 is __syncthreads): consumer c waits on barrier 1 + c for its turn
// and hands the turn over with an arrival on the next consumer's (round robin).
constexpr int kPingPongBarrier0 = 1;
constexpr int kPingPongThreads = 2 * kWarpgroupThreads;
// Named barriers of the O epilogue: kWarpgroupBarrier0, every consumer thread; + 1 + c,
// consumer c's four warps alone.
constexpr int kWarpgroupBarrier0 = 4;
FMHA_DEVICE void named_barrier_sync(int id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kPingPongThreads) : "memory");
}
FMHA_DEVICE void named_barrier_arrive(int id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kPingPongThreads) : "memory");
}

// Consumer warpgroup `consumer`'s own four warps.
FMHA_DEVICE void warpgroup_barrier(int consumer) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(kWarpgroupBarrier0 + 1 + consumer), "n"(kWarpgroupThreads) : "memory");
}
// Every consumer thread.
template <int kConsumerWarpgroups>
FMHA_DEVICE void consumers_barrier() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(kWarpgroupBarrier0), "n"(kConsumerWarpgroups * kWarpgroupThreads)
                 : "memory");
}

template <int kRegs>
FMHA_DEVICE void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
FMHA_DEVICE void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Ping-pong turns (Traits::kPingPong): n_blocks + 1 issue phases per warpgroup and tile,
// round robin from consumer 0, running on across tiles, so that the last consumer's last
// hand-over of a tile lets consumer 0 start the next one while the others drain (bench/NOTES.md
// §19, §24). The last consumer makes one arrival before its first tile (start) and consumer
// 0 one wait after its last (finish), so every arrival is matched by one wait.
template <class Tr>
struct PingPong {
    static constexpr int kLastConsumer = Tr::kConsumerWarpgroups - 1;
    int consumer;

    FMHA_DEVICE void my_turn() const {
        if constexpr (Tr::kPingPong) named_barrier_sync(kPingPongBarrier0 + consumer);
    }
    FMHA_DEVICE void your_turn() const {
        if constexpr (Tr::kPingPong) {
            named_barrier_arrive(kPingPongBarrier0 + (consumer == kLastConsumer ? 0 : consumer + 1));
        }
    }
    FMHA_DEVICE void start() const {
        if (consumer == kLastConsumer) your_turn();
    }
    FMHA_DEVICE void finish() const {
        if (consumer == 0) my_turn();  // the last consumer's last hand-over
    }
};

}  // namespace ws
}  // namespace fmha
