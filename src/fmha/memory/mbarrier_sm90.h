// mbarrier primitives (SM90): the transaction-count barriers that TMA loads complete on,
// and the plain arrive/wait pairs that hand a shared-memory stage back to its producer.
//
// Phase protocol: a barrier starts in phase 0. wait(bar, parity) returns once the phase
// with that parity has completed. A producer that waits on an "empty" barrier with
// parity (round & 1) ^ 1 passes at once on round 0 (the phase before the first counts
// as completed), so a fresh ring needs no priming arrivals.
#pragma once

#include <cstdint>

#include "fmha/utils.h"

namespace fmha {
namespace memory {

FMHA_DEVICE void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialisations visible to the async proxy (TMA) and other threads; follow
// with a CTA barrier.
FMHA_DEVICE void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also announces `bytes` of TMA transactions for the current phase.
FMHA_DEVICE void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile(
        "{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
        : "memory");
}

FMHA_DEVICE void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

FMHA_DEVICE bool mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}

// try_wait suspends the thread for a hardware-chosen time before it reports failure,
// so the loop does not spin hot.
FMHA_DEVICE void mbar_wait(uint32_t bar, uint32_t parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}

}  // namespace memory
}  // namespace fmha
