// cp.async (SM80+) wrappers: 16-byte global -> shared copies that bypass the register
// file, with a zero-fill predicate for tails, plus the commit / wait group fences.
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace memory {

// Copies 16 bytes from gmem to smem when `pred`, else writes 16 zero bytes to smem
// (src-size 0 reads nothing, so `gmem` only has to be some valid address).
FMHA_DEVICE void cp_async_16(uint32_t smem_addr, const void* gmem, bool pred) {
    const int src_bytes = pred ? kChunkBytes : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem),
                 "r"(src_bytes));
}

// Copies 4 bytes from gmem to smem (a lone float: cp.async.ca, the only form below 16 bytes).
FMHA_DEVICE void cp_async_4(uint32_t smem_addr, const void* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr), "l"(gmem));
}

FMHA_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
FMHA_DEVICE void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace memory
}  // namespace fmha
