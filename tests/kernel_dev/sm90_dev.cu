// Kernel-level test and benchmark of the ws family (src/fmha/kernel/ws.h), built
// for sm_90a by tests/kernel_dev/build_sm90.sh. Same structure as kernel_dev.cu (the SM80
// harness): instantiates Traits, checks them over odd lengths, var-len packed and padded
// batches, GQA/MQA, s_q != s_kv and poisoned O rows/columns, and times the FA3 grid. The
// reference is the project's (src/reference/reference.cu): fp32, P rounded to 16 bits at a
// power-of-two scale exactly like the kernels' softmax, so zero-mean V checks strictly.
//
// The common part (setup, checks, timing, command line) is tests/kernel_dev/dev_common.h.
//
//   sm90_dev [--test] [--bench] [--filter SUBSTR]     (default: --test --bench)
// Exit code: 0 all checks passed, 1 a check failed, 3 CUDA error.
#include "dev_common.h"
#include "fmha/kernel/ws.h"
#include "reference/reference.h"

namespace {

using dev::Config;
using dev::Layout;
using dev::Problem;
using dev::Storage;
using fmha::Params;

// ---------------------------------------------------------------------------------------
// Kernel configurations under test.

// The ws::Config the generator renders for a d = dv kernel of BM rows (generator/families/
// ws.py constants()): 227 KB, a 7 KB reserve, 64-column panels, softcapping at 128 rows; a
// 192-row tile's Short sibling, 128 rows, for causal problems of at most 1024 keys.
template <int D, int BM, int BN>
using WsConfig = fmha::ws::Config<fmha::kMaxSmemPerCta, 7 * 1024, 64, (D + 63) / 64 * 64, (D + 63) / 64 * 64, BM == 128,
                                  BM == 192 ? 128 : 0, BM == 192 ? BN : 0, BM == 192 ? 1024 : 0>;

template <typename E, int D, int BM, int BN, bool PERSIST, int ST = 0, bool PP = true>
Config make_config() {
    using T = fmha::ws::Traits<WsConfig<D, BM, BN>, E, D, D, BM, BN, BM / 16, 1, false, PERSIST, ST, PP>;
    const bool bf16 = fmha::ElementTraits<E>::kIsBf16;
    char name[128];
    std::snprintf(name, sizeof(name), "sm90_%s_d%d_%dx%d_st%d%s%s", bf16 ? "bf16" : "fp16_fp32", D, BM, BN,
                  T::kStages, PERSIST ? "_pers" : "", T::kPingPong ? "" : "_nopp");
    return Config{name, bf16, false, D, D, BM, BN, BM / 16, T::kStages, T::kSmemBytes,
                  &fmha::ws::launch<T>, &fmha::ws::launch_with_extents<T>,
                  &fmha::ws::entry<T>};
}

std::vector<Config> all_configs() {
    return {
        // static grid (SCHEDULING_MODE 0) and persistent (1), per head size
        make_config<__half, 64, 128, 128, false>(),
        make_config<__half, 64, 128, 128, true>(),
        make_config<__half, 64, 192, 128, false>(),
        make_config<__half, 64, 192, 128, true>(),
        make_config<__half, 64, 192, 128, true, 3>(),
        make_config<__half, 128, 128, 128, false>(),
        make_config<__half, 128, 128, 128, true>(),
        make_config<__half, 128, 128, 128, true, 3>(),
        make_config<__half, 192, 128, 64, false>(),
        make_config<__half, 192, 128, 64, true>(),
        make_config<__half, 192, 128, 64, true, 3>(),
        make_config<__half, 256, 128, 64, false>(),
        make_config<__half, 256, 128, 64, true>(),
        make_config<__nv_bfloat16, 64, 192, 128, true>(),
        make_config<__nv_bfloat16, 128, 128, 128, true>(),
        make_config<__nv_bfloat16, 192, 128, 64, true>(),
        make_config<__nv_bfloat16, 256, 128, 64, true>(),
    };
}

// The project's reference (src/reference/reference.cu); it reads the mask from p.
cudaError_t reference(const Params& p, bool bf16, bool /*causal*/, float* o_ref) {
    const fmha::DataType t = bf16 ? fmha::DataType::kBf16 : fmha::DataType::kFp16;
    return fmha::run_reference(p, t, t, 0, o_ref, nullptr, nullptr, nullptr, 0);
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
        // Zero-mean V checks strictly here: the reference rounds P like the kernel does.
        {"zero_mean_v", 2, 2, {1000, 4097}, {1000, 4097}, Storage::kPacked, Layout::kSeparate, 3.f, 0.f, 1.f},
        {"zero_mean_flat", 2, 2, {1000, 4097}, {1000, 4097}, Storage::kPacked, Layout::kSeparate, 1.f, 0.f, 2.f},
        {"mqa_zero_mean", 4, 1, {513, 2048, 33}, {513, 2048, 33}, Storage::kPadded, Layout::kPackedQkv, 3.f, 0.f, 1.f},
        {"sq_lt_skv_zm", 2, 2, {1, 64, 129, 700}, {4097, 64, 1000, 2000}, Storage::kPacked, Layout::kSeparate, 3.f, 0.f, 1.f},
    };
}

}  // namespace

int main(int argc, char** argv) { return dev::run_main(argc, argv, all_configs(), test_problems(), &reference); }
