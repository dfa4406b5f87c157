// Kernel choice: a small lookup over the generated registry (kernel_meta.h).
#pragma once

#include <cstdio>
#include <string>

#include "cli.h"
#include "kernel_meta.h"

namespace fmha {

// `fmha.exe -list-kernels`: one line per registry row. Needs no GPU.
void print_kernel_table(std::FILE* out);

// -kernel NAME: the row with that name, checked against everything that does not need
// a device (dtype, acc, d, dv, mask, warp specialisation). Exits 2 with the reason.
const KernelMeta* find_forced_kernel(const Problem& p);

// Exits 2 (with the closest rows) when no row fits the problem whatever the device: decided
// before the GPU is touched, so a machine without one still gets the real reason.
void require_static_fit(const Problem& p);

// The first row that fits the problem and has an image for the current device (or the
// forced row, which must have one). Exits 2 with the reason and the closest rows.
const KernelMeta& select_kernel(const Problem& p, const KernelMeta* forced, int device_sm);

// The kernel a launch of `kernel` runs for this problem: its own name, or the sibling its
// TileFn picks (KernelMeta::siblings). Needs the device where the row has siblings.
std::string tile_that_runs(const KernelMeta& kernel, const Params& params);
// ... and that tile's key block (e4m3: the reference rounds P on its running max's grid).
int block_n_that_runs(const KernelMeta& kernel, const Params& params);

}  // namespace fmha
