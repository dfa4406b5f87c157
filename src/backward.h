// fmha.exe -bwd (issue #33): the backward pass after the forward, on the same inputs, through
// the library (api/backward.h), checked against the GPU reference
// (src/reference/reference_bwd.cu) and timed.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cli.h"
#include "layouts.h"
#include "tensors.h"

namespace fmha {

// Why the backward cannot run this problem ("" where it can): what the kernels serve, and
// (sm > 0) whether the one it gets on a device of that arch can run there.
std::string backward_refusal(const Problem& p, int sm = 0);

struct BackwardResult {
    std::string kernel;                       // the library's pick for this device
    bool checked = false, passed = true;
    double us = 0;                            // a launch (preprocess, main, postprocess)
    double rms[3] = {}, worst[3] = {};        // dQ, dK, dV: relative RMS, max error / max |reference|
    int repeats = 0;                          // -deterministic: runs after the checked one,
    bool identical = true;                    // and whether the last left the same bits
};

// Runs, checks (unless -skip-checks) and times the backward of the forward in `t` (its O and
// LSE as the forward kernel wrote them) on a device of arch sm (the library's pick).
BackwardResult run_backward(const Problem& p, int sm, const SeqLens& lens, const DeviceTensors& t, cudaStream_t stream);

}  // namespace fmha
