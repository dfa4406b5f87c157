// Kernel-level test and benchmark of the flash family (src/fmha/kernel/flash_sm80.h),
// independent of the generator and the driver: instantiates a set of Traits, checks them
// against a streaming fp32 reference on the GPU over odd lengths, var-len batches, GQA/MQA,
// packed and padded storage, s_q != s_kv, and times the main head sizes. The common part
// (setup, checks, timing, command line) is tests/kernel_dev/dev_common.h.
//
//   kernel_dev [--test] [--bench] [--filter SUBSTR]     (default: --test --bench)
// Exit code: 0 all checks passed, 1 a check failed, 3 CUDA error.
#include "dev_common.h"
#include "fmha/kernel/flash_sm80.h"

namespace {

using dev::Config;
using dev::Layout;
using dev::Problem;
using dev::Storage;
using fmha::Params;

// ---------------------------------------------------------------------------------------
// Kernel configurations under test.

template <typename E, int D, int DV, int BM, int BN, int WM, bool ACC16, int ST = 0>
Config make_config() {
    using T = fmha::flash_sm80::Traits<E, D, DV, BM, BN, WM, 1, ACC16, ST>;
    const bool bf16 = fmha::ElementTraits<E>::kIsBf16;
    char name[128];
    std::snprintf(name, sizeof(name), "%s_d%d%s_%dx%d_w%d_st%d", bf16 ? "bf16" : (ACC16 ? "fp16" : "fp16_fp32"), D,
                  D == DV ? "" : ("_dv" + std::to_string(DV)).c_str(), BM, BN, WM, T::kStages);
    return Config{name,       bf16,       ACC16,          D, DV, BM, BN, WM, T::kStages, T::kSmemBytes,
                  &fmha::flash_sm80::launch<T>, nullptr, &fmha::flash_sm80::entry<T>};
}

std::vector<Config> all_configs() {
    return {
        // recommended defaults per head size
        make_config<__half, 16, 16, 128, 64, 4, true>(),
        make_config<__half, 24, 24, 128, 64, 4, true>(),
        make_config<__half, 32, 32, 128, 64, 4, true>(),
        make_config<__half, 40, 40, 128, 64, 4, true>(),
        make_config<__half, 64, 64, 128, 64, 4, true>(),
        make_config<__half, 72, 72, 128, 64, 4, true>(),
        make_config<__half, 96, 96, 128, 64, 4, true>(),
        make_config<__half, 128, 128, 128, 64, 4, true>(),
        make_config<__half, 128, 64, 128, 64, 4, true>(),
        make_config<__half, 192, 192, 64, 64, 4, true>(),
        make_config<__half, 256, 256, 64, 64, 4, true>(),
        make_config<__half, 64, 64, 128, 64, 4, false>(),
        make_config<__half, 128, 128, 128, 64, 4, false>(),
        make_config<__half, 256, 256, 64, 64, 4, false>(),
        make_config<__nv_bfloat16, 64, 64, 128, 64, 4, false>(),
        make_config<__nv_bfloat16, 128, 128, 128, 64, 4, false>(),
        make_config<__nv_bfloat16, 160, 160, 64, 64, 4, false>(),
        make_config<__nv_bfloat16, 256, 256, 64, 64, 4, false>(),
        // alternatives, for the benchmark (kStages forced where the last argument is given)
        make_config<__half, 64, 64, 128, 64, 4, true, 1>(),
        make_config<__nv_bfloat16, 64, 64, 128, 64, 4, false, 1>(),
        make_config<__half, 128, 128, 128, 64, 4, true, 2>(),
        make_config<__half, 128, 128, 128, 64, 4, false, 2>(),
        make_config<__nv_bfloat16, 128, 128, 128, 64, 4, false, 2>(),
        make_config<__half, 256, 256, 128, 64, 8, true>(),
        make_config<__half, 256, 256, 128, 64, 8, false>(),
        make_config<__nv_bfloat16, 256, 256, 128, 64, 8, false>(),
    };
}

// ---------------------------------------------------------------------------------------
// Reference.

constexpr int kRefMaxCols = 8;  // per lane: head sizes up to 256

// One warp per (query row, head, batch), keys streamed with an online softmax in fp32.
// Writes o_ref[token, head, 0:dv] (dense); a row with no allowed key gets 0.
template <typename E>
__global__ void reference_kernel(Params p, bool causal, float* o_ref) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int head = blockIdx.y;
    const int batch = blockIdx.z;
    const int q_len = p.q_lens[batch];
    if (row >= q_len) return;
    const int kv_len = p.kv_lens[batch];
    const int kv_head = head / (p.h / p.h_kv);
    const int token = p.q_offsets[batch] + row;
    const E* q = static_cast<const E*>(p.q) + token * p.q_row_stride + head * p.q_head_stride;
    float qv[kRefMaxCols], acc[kRefMaxCols];
    for (int i = 0; i < kRefMaxCols; ++i) {
        const int c = i * 32 + lane;
        qv[i] = c < p.d ? dev::to_float(q[c]) : 0.f;
        acc[i] = 0.f;
    }
    const int limit = causal ? min(kv_len, row + kv_len - q_len + 1) : kv_len;
    float m = -INFINITY, l = 0.f;
    for (int j = 0; j < limit; ++j) {
        const int64_t kv_token = p.kv_offsets[batch] + j;
        const E* k = static_cast<const E*>(p.k) + kv_token * p.k_row_stride + kv_head * p.k_head_stride;
        const E* v = static_cast<const E*>(p.v) + kv_token * p.v_row_stride + kv_head * p.v_head_stride;
        float dot = 0.f;
        for (int i = 0; i < kRefMaxCols; ++i) {
            const int c = i * 32 + lane;
            if (c < p.d) dot += qv[i] * dev::to_float(k[c]);
        }
        for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        const float s = dot * p.scale_bmm1;
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);
        const float pj = expf(s - m_new);
        l = l * corr + pj;
        for (int i = 0; i < kRefMaxCols; ++i) {
            const int c = i * 32 + lane;
            if (c < p.dv) acc[i] = acc[i] * corr + pj * dev::to_float(v[c]);
        }
        m = m_new;
    }
    const float scale = l > 0.f ? p.scale_softmax * p.scale_bmm2 / l : 0.f;
    for (int i = 0; i < kRefMaxCols; ++i) {
        const int c = i * 32 + lane;
        if (c < p.dv) o_ref[(static_cast<int64_t>(token) * p.h + head) * p.dv + c] = acc[i] * scale;
    }
}

cudaError_t reference(const Params& p, bool bf16, bool causal, float* o_ref) {
    constexpr int kWarps = 4;
    const dim3 grid((p.s_q_max + kWarps - 1) / kWarps, p.h, p.b);
    if (bf16) {
        reference_kernel<__nv_bfloat16><<<grid, kWarps * 32>>>(p, causal, o_ref);
    } else {
        reference_kernel<__half><<<grid, kWarps * 32>>>(p, causal, o_ref);
    }
    return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------
// Problems.

std::vector<Problem> test_problems() {
    return {
        {"varlen_odd", 2, 2, {1, 7, 77, 1000, 4097}, {1, 7, 77, 1000, 4097}, Storage::kPacked, Layout::kSeparate},
        {"padded_odd", 2, 1, {77, 1, 130, 64}, {77, 1, 130, 64}, Storage::kPadded, Layout::kPackedQkv},
        {"gqa_8_2", 8, 2, {300, 129, 64}, {300, 129, 64}, Storage::kPacked, Layout::kPackedQkv},
        {"sq_lt_skv", 4, 2, {1, 50, 200, 63}, {100, 333, 1024, 64}, Storage::kPadded, Layout::kSeparate},
        {"sq_gt_skv", 2, 1, {100, 300, 5}, {10, 64, 1}, Storage::kPacked, Layout::kSeparate},
        {"zero_mean_v", 2, 2, {1000, 4097}, {1000, 4097}, Storage::kPacked, Layout::kSeparate, 3.f, 0.f, 1.f, false},
        {"flat_info", 2, 2, {1000, 4097}, {1000, 4097}, Storage::kPacked, Layout::kSeparate, 1.f, 0.f, 2.f, false},
    };
}

}  // namespace

int main(int argc, char** argv) { return dev::run_main(argc, argv, all_configs(), test_problems(), &reference); }
