#include "backward.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "check.h"
#include "cuda_check.h"
#include "device_buffer.h"
#include "api/backward.h"
#include "inputs.h"
#include "reference/reference_bwd.h"
#include "save_tensors.h"
#include "timing.h"

namespace fmha {
namespace {

// Relative RMS and max error / max |reference| of a 16-bit dense [rows, cols] output against
// its fp32 reference, over the rows `take` keeps; the reference's RMS and max read at least
// `floor` (where its terms cancel, the reference is rounding noise: reference_bwd.cu).
template <class Take>
void compare(const std::vector<uint16_t>& got, const std::vector<float>& want, BitsToFloat to_float, int64_t rows,
             int64_t cols, Take take, double floor, double* rms, double* worst) {
    double err = 0, ref = 0, top = 0, max_err = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; ++r) {
        if (!take(r)) continue;
        for (int64_t c = 0; c < cols; ++c, ++n) {
            const double a = to_float(got[size_t(r * cols + c)]), b = want[size_t(r * cols + c)];
            const double e = std::isfinite(a) ? std::fabs(a - b) : INFINITY;
            err += e * e, ref += b * b, top = std::max(top, std::fabs(b)), max_err = std::max(max_err, e);
        }
    }
    if (n == 0) return void(*rms = *worst = 0);
    const double ref_rms = std::max(std::sqrt(ref / double(n)), floor), ref_top = std::max(top, floor);
    *rms = ref_rms > 0 ? std::sqrt(err / double(n)) / ref_rms : std::sqrt(err);
    *worst = ref_top > 0 ? max_err / ref_top : max_err;
}

// The floor of a reference's scale: 2^-10 of its terms' RMS magnitude. The kernels' error on
// a cancelling sum is fp32 rounding of those terms (~2^-21 at d = 256), so it stays under
// the bounds below; a wrong term is of the magnitude's order and fails.
constexpr double kMagnitudeFloor = 0x1p-10;

// What the library is asked for (tma_ready left to the tensors).
api::BackwardAsk ask_of(const Problem& p) {
    api::BackwardAsk a;
    a.dtype = p.dtype, a.d = p.d, a.dv = p.dv, a.mask = p.mask;
    a.bias = p.attention_bias;
    a.paged = p.layout == Layout::kPagedKv;
    a.score_extras = p.softcapping_scale_bmm1 > 0.f || p.alibi || p.dropout_p > 0.f;
    return a;
}

}  // namespace

std::string backward_refusal(const Problem& p, int sm) {
    const api::BackwardAsk a = ask_of(p);
    std::string why = api::backward_refusal(a);
    if (why.empty() && sm > 0) why = api::backward_arch_refusal(a, sm);
    return why.empty() ? why : "-bwd: " + why;
}

BackwardResult run_backward(const Problem& p, int sm, const SeqLens& lens, const DeviceTensors& t, cudaStream_t stream) {
    BackwardResult r;
    const Params& prm = t.params;
    const int64_t q_rows = lens.q_storage_tokens, kv_rows = lens.kv_storage_tokens;
    // dO laid out as O (guard rows included), random from -seed's own stream.
    DeviceBuffer<uint16_t> d_o(t.o.size());
    fill_flat(p.dtype, d_o.get(), static_cast<int64_t>(d_o.size()),
              FillSpec{p.seed, kStreamDO, 1.f, 1.f, false, p.randn});
    DeviceBuffer<uint16_t> dq(size_t(q_rows) * p.h * p.d), dk(size_t(kv_rows) * p.h_kv * p.d),
        dv(size_t(kv_rows) * p.h_kv * p.dv);

    flash_bwd::BwdParams bp;
    bp.p = prm;
    bp.d_o = static_cast<const char*>(static_cast<const void*>(d_o.get())) +
             (static_cast<const char*>(prm.o) - reinterpret_cast<const char*>(t.o.get()));
    bp.do_row_stride = prm.o_row_stride, bp.do_head_stride = prm.o_head_stride;
    bp.lse = t.lse.get();
    bp.deterministic = p.deterministic;
    bp.dq = dq.get(), bp.dk = dk.get(), bp.dv = dv.get();
    bp.dq_row_stride = int64_t(p.h) * p.d, bp.dq_head_stride = p.d;
    bp.dk_row_stride = int64_t(p.h_kv) * p.d, bp.dk_head_stride = p.d;
    bp.dv_row_stride = int64_t(p.h_kv) * p.dv, bp.dv_head_stride = p.dv;
    const size_t ws_bytes = api::backward_workspace_bytes(prm);
    DeviceBuffer<char> workspace(ws_bytes);
    api::BackwardAsk a = ask_of(p);
    a.tma_ready = api::backward_tma_ready(bp);
    r.kernel = api::backward_kernel_name(a, sm);
    const auto launch = [&] { return api::backward_launch(a, bp, workspace.get(), ws_bytes, sm, stream); };

    CUDA_CHECK(launch());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const bool reference = !p.skip_checks || !p.save_dir.empty();
    DeviceBuffer<float> dq_ref, dk_ref, dv_ref, ref_scratch;
    if (reference) {
        dq_ref = DeviceBuffer<float>(dq.size()), dk_ref = DeviceBuffer<float>(dk.size());
        dv_ref = DeviceBuffer<float>(dv.size());
        ref_scratch = DeviceBuffer<float>(reference_bwd_scratch_floats(prm));
        CUDA_CHECK(run_reference_bwd(prm, p.dtype, bp.d_o, dq_ref.get(), dk_ref.get(), dv_ref.get(), ref_scratch.get(),
                                     stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    if (!p.save_dir.empty())
        save_backward(p, t, bp.d_o, dq.get(), dk.get(), dv.get(), dq_ref.get(), dk_ref.get(), dv_ref.get(), stream);
    // -deterministic: the checked run's bits, for the timed runs' to match.
    std::vector<uint16_t> first[3];
    if (p.deterministic) first[0] = to_host(dq), first[1] = to_host(dk), first[2] = to_host(dv);
    if (!p.skip_checks) {
        // Rows inside the sequences (the reference writes no others).
        std::vector<char> q_in(size_t(q_rows), 0), kv_in(size_t(kv_rows), 0);
        for (int b = 0; b < p.b; ++b) {
            for (int i = 0; i < lens.q_lens[b]; ++i) q_in[size_t(lens.q_offsets[b] + i)] = 1;
            for (int j = 0; j < lens.kv_lens[b]; ++j) kv_in[size_t(lens.kv_offsets[b] + j)] = 1;
        }
        const BitsToFloat to_float = bits_to_float(p.dtype);
        int64_t q_tokens = 0, kv_tokens = 0;
        for (int b = 0; b < p.b; ++b) q_tokens += lens.q_lens[b], kv_tokens += lens.kv_lens[b];
        int64_t counts[3] = {q_tokens * p.h * p.d, kv_tokens * p.h_kv * p.d, kv_tokens * p.h_kv * p.dv};
        double mag[3];
        CUDA_CHECK(reference_bwd_magnitudes(ref_scratch.get(), mag, counts));
        compare(to_host(dq), to_host(dq_ref), to_float, q_rows, int64_t(p.h) * p.d,
                [&](int64_t row) { return q_in[size_t(row)] != 0; }, kMagnitudeFloor * mag[0], &r.rms[0], &r.worst[0]);
        compare(to_host(dk), to_host(dk_ref), to_float, kv_rows, int64_t(p.h_kv) * p.d,
                [&](int64_t row) { return kv_in[size_t(row)] != 0; }, kMagnitudeFloor * mag[1], &r.rms[1], &r.worst[1]);
        compare(to_host(dv), to_host(dv_ref), to_float, kv_rows, int64_t(p.h_kv) * p.dv,
                [&](int64_t row) { return kv_in[size_t(row)] != 0; }, kMagnitudeFloor * mag[2], &r.rms[2], &r.worst[2]);
        // P and dS are rounded to the input dtype before their products (as FlashAttention's
        // kernels round them), the outputs once more: bf16 keeps 8 bits, fp16 11. A draft's
        // bounds, to be set from measured figures.
        const bool bf16 = p.dtype == DataType::kBf16;
        const double rms_bound = bf16 ? 2e-2 : 4e-3, max_bound = bf16 ? 6e-2 : 1.5e-2;
        r.checked = true;
        for (int i = 0; i < 3; ++i) r.passed = r.passed && r.rms[i] <= rms_bound && r.worst[i] <= max_bound;
    }

    // Timing: the three launches, p.runs times after p.warm_up_runs.
    for (int i = 0; i < p.warm_up_runs; ++i) CUDA_CHECK(launch());
    const float ms = time_on_stream(stream, [&] {
        for (int i = 0; i < p.runs; ++i) CUDA_CHECK(launch());
    });
    r.us = 1e3 * ms / p.runs;
    if (p.deterministic) {
        r.repeats = p.warm_up_runs + p.runs;
        r.identical = first[0] == to_host(dq) && first[1] == to_host(dk) && first[2] == to_host(dv);
    }
    return r;
}

}  // namespace fmha
