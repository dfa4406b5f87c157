// bin/fmha.exe: parse -> problem -> (list kernels) -> device -> dispatch -> data ->
// reference -> runs -> checks -> print -> exit code. The contract is SPEC.md.
#include <cuda_runtime.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "backward.h"
#include "check.h"
#include "cli.h"
#include "cuda_check.h"
#include "dispatch.h"
#include "format.h"
#include "kernel_meta.h"
#include "metrics.h"
#include "reference/reference.h"
#include "save_tensors.h"
#include "tensors.h"
#include "timing.h"

namespace fmha {
namespace {

constexpr int kLabelWidth = 14;  // "Kernel........: " -- label and dots, then ": "

struct Device {
    std::string name;
    int sm = 0;
    int num_sms = 0;
    size_t l2_bytes = 0;
};

// Without a driver the runtime says "CUDA driver version is insufficient", which sends people
// to upgrade a driver they do not have: name the real cause (exit 3 either way).
[[noreturn]] void no_device(cudaError_t err) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);  // 0 when no driver is installed
    cudaRuntimeGetVersion(&runtime);
    std::fflush(stdout);
    if (driver == 0) {
        std::fprintf(stderr, "CUDA error: no NVIDIA driver on this machine, so no GPU to run on "
                     "(cudaGetDeviceCount: %s)\n", cudaGetErrorString(err));
    } else if (err == cudaErrorInsufficientDriver) {
        std::fprintf(stderr, "CUDA error: the NVIDIA driver supports CUDA %d.%d, this build needs %d.%d "
                     "(cudaGetDeviceCount: %s)\n",
                     driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, cudaGetErrorString(err));
    } else {
        std::fprintf(stderr, "CUDA error: no CUDA device visible; is CUDA_VISIBLE_DEVICES set? (cudaGetDeviceCount: %s)\n",
                     cudaGetErrorString(err));
    }
    std::exit(kExitCudaError);
}

Device open_device() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || (err == cudaSuccess && count == 0)) {
        no_device(err == cudaSuccess ? cudaErrorNoDevice : err);
    }
    if (err != cudaSuccess) cuda_fail(err, "cudaGetDeviceCount");
    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    return {prop.name, prop.major * 10 + prop.minor, prop.multiProcessorCount, size_t(prop.l2CacheSize)};
}

void launch(const KernelMeta& kernel, const Params& params, cudaStream_t stream) {
    const cudaError_t err = kernel.launch(params, stream);
    if (err != cudaSuccess) cuda_fail(err, (std::string("launch ") + kernel.name).c_str());
}

void print_field(const char* label, const std::string& value) {
    std::string dots(kLabelWidth - std::string(label).size(), '.');
    std::printf("%s%s: %s\n", label, dots.c_str(), value.c_str());
}

std::string checks_word(const char* word, const char* colour) {
    const bool use_colour = isatty(fileno(stdout)) && std::getenv("NO_COLOR") == nullptr;
    return use_colour && colour != nullptr ? std::string(colour) + word + "\033[0m" : word;
}

std::string header_line(const Problem& p, const KernelMeta& k) {
    return format("v1=0 il=0 s_q=%d, s=%d b=%d h=%d/%d d=%d/%d dtype=%s, output_dtype=%s, "
                  "flash_attn=true, warp_spec=%s, mask=%s, alibi=%s, attn=%s, qkv_layout=%s, "
                  "wm=%d wn=%d",
                  p.s_q, p.s, p.b, p.h, p.h_kv, p.d, p.dv, dtype_label(p), output_dtype_label(p),
                  k.warp_specialized ? "true" : "false", mask_label(p.mask), p.alibi ? "true" : "false", attn_label(p),
                  layout_label(p.layout), k.warps_m, k.warps_n);
}

struct Timing {
    bool reference_ran;
    float reference_ms;  // one run of the reference
    double us;           // one launch of the kernel
    int input_sets;      // input copies the timed launches cycle through
};

// -v 1: the labelled details before the summary.
void print_details(const Problem& p, const Device& dev, const SeqLens& lens, const CheckResult& check,
                   const Timing& t) {
    print_field("Device", format("%s, sm_%d, %d SMs", dev.name.c_str(), dev.sm, dev.num_sms));
    print_field("Problem", format("b=%d h=%d h_kv=%d d=%d dv=%d s=%d s_q=%d min_s=%d, %s storage",
                                  p.b, p.h, p.h_kv, p.d, p.dv, p.s, p.s_q, p.min_s,
                                  p.pad_s ? "padded" : "packed"));
    const char* mask = mask_label(p.mask);
    print_field("Mask", p.sliding_window_size > 0      ? format("%s, window %d", mask, p.sliding_window_size)
                        : p.chunked_attention_size > 0 ? format("%s, chunk %d", mask, p.chunked_attention_size)
                                                       : std::string(mask));
    print_field("Tokens", format("q %lld (max %d), kv %lld (max %d)", (long long)lens.q_total,
                                 lens.s_q_max, (long long)lens.kv_total, lens.s_kv_max));
    print_field("Scales", format("bmm1 %g, softmax %g, bmm2 %g%s%s", p.scale_bmm1, p.scale_softmax, p.scale_bmm2,
                                 p.softcapping_scale_bmm1 > 0.f
                                     ? format(", softcap %g", p.softcapping_scale_bmm1).c_str()
                                     : "",
                                 p.alibi            ? ", ALiBi slopes"
                                 : p.attention_bias ? format(", bias [%s, %s, s_q, s]", p.bias_per_batch ? "b" : "1",
                                                             p.bias_per_head ? "h" : "1").c_str()
                                                    : ""));
    print_field("Inputs", format("%s, range q/k/v %g/%g/%g, scale q/k/v %g/%g/%g",
                                 p.ones ? "ones" : p.randn ? "normal" : "uniform", p.range_q,
                                 p.range_k, p.range_v, p.scale_q, p.scale_k, p.scale_v));
    print_field("Seed", std::to_string(p.seed));
    print_field("Runs", format("%d warm-up, %d timed, cycling %d input set%s", p.warm_up_runs, p.runs,
                               t.input_sets, t.input_sets == 1 ? "" : "s"));
    print_field("Reference", t.reference_ran ? format("%.3f ms", t.reference_ms) : "not run");
    if (!p.skip_checks) {
        print_field("Epsilon", format("%g", p.epsilon));
        print_field("Max abs err", format("%.6g", check.max_abs_err));
        print_field("Max rel err", format("%.6g", check.max_rel_err));
        print_field("Ambiguous", format("%lld elements within the reference's rounding ambiguity",
                                        (long long)check.ambiguous));
        print_field("Failures", format("%lld of %lld elements", (long long)check.failures,
                                       (long long)check.checked));
        print_field("Untouched", format("%lld of %lld elements outside the sequences written",
                                        (long long)check.touched, (long long)check.untouched_checked));
        if (p.save_softmax)
            print_field("Softmax stats", format("LSE of %lld rows, %lld fail (tolerance %s), max abs err %.3g; "
                                                "%lld of %lld rows past the sequences written",
                                                (long long)check.lse_checked, (long long)check.lse_failures,
                                                lse_tolerance_text(check).c_str(), check.lse_max_abs_err,
                                                (long long)check.lse_touched,
                                                (long long)check.lse_untouched_checked));
    }
}

// Verbose details (-v 1), then the four summary lines of SPEC.md, then on failure the
// first mismatches and the error statistics.
// tile: the kernel that ran, kernel's own name or one of its siblings (tile_that_runs).
void print_results(const Problem& p, const Device& dev, const KernelMeta& kernel, const std::string& tile,
                   const SeqLens& lens, const CustomMask& custom, const CheckResult& check, const Timing& t) {
    const double flops = attention_flops(p, lens, custom);
    const double bytes = attention_bytes(p, lens);
    const std::string speedup =
        t.reference_ran ? format("(%.2fx)", 1e3 * t.reference_ms / t.us) : "(n/a)";

    if (p.verbose) print_details(p, dev, lens, check, t);
    std::printf("%s\n", header_line(p, kernel).c_str());
    print_field("Kernel", kernel.name);
    if (p.verbose) print_field("Tile ran", tile);
    print_field("Checks", p.skip_checks      ? "DISABLED"
                          : check.passed() ? checks_word("SUCCESS", "\033[32m")
                                           : checks_word("FAILED", "\033[31m"));
    std::printf("Elapsed ......: %.6f us %s, %.2f Tflop/s, %.2f GB/s\n", t.us, speedup.c_str(),
                flops / (t.us * 1e-6) / 1e12, bytes / (t.us * 1e-6) / 1e9);
    if (!p.skip_checks && !check.passed()) {
        for (const std::string& line : check.report) std::printf("%s\n", line.c_str());
        std::printf("%s\n", check_summary(p, check).c_str());
    }
}

// Scratch the kernel asks for (decode: split-KV partials), zeroed once and shared by every
// launch (one stream); empty when it asks for none.
DeviceBuffer<char> attach_workspace(const KernelMeta& kernel, Params& prm) {
    DeviceBuffer<char> workspace;
    if (kernel.workspace == nullptr) return workspace;
    const size_t bytes = kernel.workspace(prm);
    if (bytes > 0) {
        workspace = DeviceBuffer<char>(bytes);
        CUDA_CHECK(cudaMemset(workspace.get(), 0, bytes));  // zeroed once (Params::workspace)
        prm.workspace = workspace.get();
        prm.workspace_bytes = bytes;
    }
    return workspace;
}

// The unfused reference's output, its rounding ambiguity and (-save-softmax) its LSE.
struct ReferenceRun {
    bool ran = false;
    float ms = 0.f;  // one run
    DeviceBuffer<float> o, amb, lse, lse_amb;
};

// The reference path, timed once, where the checks or -save-tensors need it.
ReferenceRun time_reference(const Problem& p, const SeqLens& lens, const DeviceTensors& t, const KernelMeta& kernel,
                            cudaStream_t stream) {
    ReferenceRun r;
    r.ran = !p.skip_checks || !p.save_dir.empty();
    if (!r.ran) return r;
    const size_t o_elems = size_t(lens.q_storage_tokens) * p.h * p.dv;
    r.o = DeviceBuffer<float>(o_elems);
    r.amb = DeviceBuffer<float>(o_elems);
    if (p.save_softmax) {  // [b, h, s_q_max] as the kernel's
        r.lse = DeviceBuffer<float>(t.lse.size());
        r.lse_amb = DeviceBuffer<float>(t.lse.size());
    }
    CUDA_CHECK(prepare_reference(t.logical, p.dtype, p.kv_dtype));
    r.ms = time_on_stream(stream, [&] {
        // e4m3: P is rounded on the grid of the exact running max of the key blocks of the
        // tile that runs (the row's or its sibling's).
        const int p_block_keys = p.dtype == DataType::kE4m3 ? block_n_that_runs(kernel, t.params) : 0;
        CUDA_CHECK(run_reference(t.logical, p.dtype, p.kv_dtype, p_block_keys, r.o.get(), r.amb.get(), r.lse.get(),
                                 r.lse_amb.get(), stream));
    });
    return r;
}

// Microseconds a launch, averaged over p.runs timed launches after p.warm_up_runs untimed
// ones, cycling through `sets`.
double time_kernel(const Problem& p, const KernelMeta& kernel, const std::vector<Params>& sets,
                   cudaStream_t stream) {
    for (int i = 0; i < p.warm_up_runs; ++i) launch(kernel, sets[i % sets.size()], stream);
    const float total_ms = time_on_stream(stream, [&] {
        for (int i = 0; i < p.runs; ++i) launch(kernel, sets[i % sets.size()], stream);
    });
    CUDA_CHECK(cudaGetLastError());
    return 1e3 * double(total_ms) / p.runs;
}

int run(int argc, char** argv) {
    const Problem p = parse_cli(argc, argv);
    if (p.list_kernels) {
        print_kernel_table(stdout);
        return kExitOk;
    }
    const KernelMeta* forced = find_forced_kernel(p);
    if (!p.save_dir.empty()) prepare_save_dir(p.save_dir);
    if (forced == nullptr) require_static_fit(p);

    const Device dev = open_device();
    const KernelMeta& kernel = select_kernel(p, forced, dev.sm);
    if (p.bwd) {
        const std::string why = backward_refusal(p, dev.sm);
        if (!why.empty()) fail_args(why);
    }

    const SeqLens lens = make_seqlens(p);
    DeviceTensors t = make_tensors(p, lens);
    t.params.num_sms = dev.num_sms;
    const DeviceBuffer<char> workspace = attach_workspace(kernel, t.params);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    const ReferenceRun ref = time_reference(p, lens, t, kernel, stream);

    // One clean launch on a poisoned O: this is the output that is checked and saved.
    poison_output(p, t, stream);
    launch(kernel, t.params, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> o_raw;
    std::vector<float> o_ref_host, o_amb_host, lse_host, lse_ref_host, lse_amb_host;
    if (!p.skip_checks) {
        o_raw = to_host(t.o);
        o_ref_host = to_host(ref.o);
        o_amb_host = to_host(ref.amb);
    }
    if (!p.skip_checks && p.save_softmax) {
        lse_host = to_host(t.lse);
        lse_ref_host = to_host(ref.lse);
        lse_amb_host = to_host(ref.lse_amb);
    }
    if (!p.save_dir.empty()) save_tensors(p, lens, t, ref.o.get(), ref.lse.get(), kernel, stream);

    std::vector<DeviceBuffer<uint8_t>> input_copies;
    const std::vector<Params> sets = timing_input_sets(t, dev.l2_bytes, &input_copies);
    const double us = time_kernel(p, kernel, sets, stream);

    CheckResult check;
    if (!p.skip_checks) check = check_output(p, lens, o_raw, o_ref_host, o_amb_host);
    if (!p.skip_checks && p.save_softmax) check_lse(p, lens, lse_host, lse_ref_host, lse_amb_host, check);
    const Timing timing{ref.ran, ref.ms, us, static_cast<int>(sets.size())};
    print_results(p, dev, kernel, tile_that_runs(kernel, t.params), lens, t.variants.custom_mask_host, check,
                  timing);

    bool bwd_passed = true, bwd_identical = true;
    if (p.bwd) {
        const BackwardResult bwd = run_backward(p, dev.sm, lens, t, stream);
        const double flops = 2.5 * attention_flops(p, lens, t.variants.custom_mask_host);
        print_field("Bwd kernel", bwd.kernel);
        print_field("Backward", format("%.6f us, %.2f Tflop/s", bwd.us, flops / (bwd.us * 1e-6) / 1e12));
        if (bwd.checked) {
            print_field("Bwd checks", format("%s (relative RMS dQ %.3g, dK %.3g, dV %.3g; max error over max |ref| "
                                             "dQ %.3g, dK %.3g, dV %.3g)",
                                             bwd.passed ? "SUCCESS" : "FAILED", bwd.rms[0], bwd.rms[1], bwd.rms[2],
                                             bwd.worst[0], bwd.worst[1], bwd.worst[2]));
        }
        if (p.deterministic)
            print_field("Bwd repeats", format("%s over %d runs", bwd.identical ? "IDENTICAL" : "DIFFERENT", bwd.repeats));
        bwd_passed = !bwd.checked || bwd.passed;
        bwd_identical = bwd.identical;
    }

    CUDA_CHECK(cudaStreamDestroy(stream));
    // -deterministic's bits are compared even with -skip-checks.
    return (p.skip_checks || (check.passed() && bwd_passed)) && bwd_identical ? kExitOk : kExitCheckFailed;
}

}  // namespace
}  // namespace fmha

int main(int argc, char** argv) {
    try {
        return fmha::run(argc, argv);
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        std::fprintf(stderr, "error: out of memory (host allocation)\n");
        return fmha::kExitCudaError;
    }
}
