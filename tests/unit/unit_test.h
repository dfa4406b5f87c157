// Shared plumbing of the device unit tests (tests/unit/, one file per header of src/fmha/):
// CUDA errors as gtest failures, a skip where there is no usable GPU, device buffers, and the
// host-side data helpers the CPU references use.
//
// A device test derives its fixture from DeviceTest (or DeviceTestP<Param>): SetUp() skips
// it with "no CUDA device" where cudaGetDeviceCount fails or finds none, so bin/unit_tests
// on a CI machine skips the device tests and still runs the host-only ones.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

// Fails the current test (and returns from the enclosing void function) on a CUDA error.
// Helpers that use it return void; call them through ASSERT_NO_FATAL_FAILURE(...).
#define CUDA_ASSERT(call)                                                                    \
    do {                                                                                     \
        const cudaError_t unit_err_ = (call);                                                \
        ASSERT_EQ(unit_err_, cudaSuccess) << #call << ": " << cudaGetErrorString(unit_err_); \
    } while (0)

// After a <<<...>>> launch: the launch error, then the kernel's own.
#define CUDA_ASSERT_LAUNCH()                   \
    do {                                       \
        CUDA_ASSERT(cudaGetLastError());       \
        CUDA_ASSERT(cudaDeviceSynchronize());  \
    } while (0)

namespace unit {

// Every primitive under test needs SM80 (mma.sync bf16, ldmatrix, cp.async).
constexpr int kMinSm = 80;

// Empty when a usable GPU is present, else why the device tests skip. Decided once.
inline const std::string& no_device_reason() {
    static const std::string reason = [] {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
            cudaGetLastError();  // clear the sticky error of a machine without a driver
            return std::string("no CUDA device");
        }
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return std::string("no CUDA device");
        const int sm = prop.major * 10 + prop.minor;
        if (sm < kMinSm) return "needs an SM" + std::to_string(kMinSm) + "+ GPU, found sm_" + std::to_string(sm);
        return std::string();
    }();
    return reason;
}

class DeviceTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!no_device_reason().empty()) GTEST_SKIP() << no_device_reason();
    }
};

template <class Param>
class DeviceTestP : public DeviceTest, public ::testing::WithParamInterface<Param> {};

// A device test of an arch-specific instruction: skips unless device 0 is sm_kMinSm ..
// sm_kMaxSm (kMaxSm 0: any newer one).
template <int kMinSm, int kMaxSm = 0>
class ArchTest : public DeviceTest {
  protected:
    void SetUp() override {
        DeviceTest::SetUp();
        if (IsSkipped()) return;
        cudaDeviceProp prop{};
        ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
        const int sm = prop.major * 10 + prop.minor;
        const std::string upto = kMaxSm == kMinSm ? "" : kMaxSm > 0 ? " .. sm_" + std::to_string(kMaxSm) : "+";
        if (sm < kMinSm || (kMaxSm > 0 && sm > kMaxSm))
            GTEST_SKIP() << "needs sm_" << kMinSm << upto << ", found sm_" << sm;
    }
};

// An owning device array. Every call returns the CUDA error for CUDA_ASSERT.
template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() { cudaFree(ptr_); }

    // n elements, every byte set to `byte` (0 by default).
    cudaError_t alloc(size_t n, int byte = 0) {
        cudaFree(ptr_);
        ptr_ = nullptr;
        size_ = n;
        cudaError_t err = cudaMalloc(&ptr_, n * sizeof(T));
        return err != cudaSuccess ? err : cudaMemset(ptr_, byte, n * sizeof(T));
    }
    cudaError_t upload(const std::vector<T>& host) {
        const cudaError_t err = alloc(host.size());
        return err != cudaSuccess ? err
                                  : cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
    cudaError_t download(std::vector<T>* host) const {
        host->resize(size_);
        return cudaMemcpy(host->data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost);
    }
    T* get() const { return ptr_; }
    size_t size() const { return size_; }

  private:
    T* ptr_ = nullptr;
    size_t size_ = 0;
};

// ---- host data ---------------------------------------------------------------------------

// Reproducible inputs: uniform floats, or integers (exact in f16/bf16 and in their
// products, so an mma result can be compared bit for bit).
inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

inline std::vector<float> random_ints(size_t n, int lo, int hi, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(dist(gen));
    return v;
}

// n values exact in e4m3 whose products and sums stay exact in f32: {-1, -0.5, 0, 0.5, 1}
// (signed) or eighths in [0, 1] (probabilities).
inline std::vector<float> dyadic(size_t n, bool is_signed, uint32_t seed) {
    std::vector<float> v = is_signed ? random_ints(n, -2, 2, seed) : random_ints(n, 0, 8, seed);
    for (float& x : v) x /= is_signed ? 2.f : 8.f;
    return v;
}

// Floats as e4m3 bytes (to nearest even, saturating).
inline std::vector<uint8_t> to_e4m3(const std::vector<float>& v) {
    std::vector<uint8_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = __nv_cvt_float_to_fp8(v[i], __NV_SATFINITE, __NV_E4M3);
    return out;
}

// An e4m3 byte's value, and a double rounded to e4m3 (to nearest even, saturating).
inline double from_e4m3(uint8_t x) {
    __nv_fp8_e4m3 v;
    v.__x = x;
    return static_cast<double>(static_cast<float>(v));
}
inline double round_e4m3(double x) {
    return from_e4m3(__nv_cvt_float_to_fp8(static_cast<float>(x), __NV_SATFINITE, __NV_E4M3));
}

template <typename Element>
const char* element_name() {
    return std::is_same<Element, __half>::value ? "fp16" : "bf16";
}

// float <-> the 16-bit element types, round to nearest, on the host.
template <typename Element>
Element to_element(float x) {
    if constexpr (std::is_same<Element, __half>::value) {
        return __float2half_rn(x);
    } else {
        return __float2bfloat16_rn(x);
    }
}

template <typename Element>
float to_float(Element x) {
    if constexpr (std::is_same<Element, __half>::value) {
        return __half2float(x);
    } else {
        return __bfloat162float(x);
    }
}

template <typename Element>
std::vector<Element> to_elements(const std::vector<float>& v) {
    std::vector<Element> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = to_element<Element>(v[i]);
    return out;
}

// What a float becomes after a round trip through Element (the reference's view of an input).
template <typename Element>
float round_to(float x) {
    return to_float(to_element<Element>(x));
}

// Raw bits of a 16-bit element, for bit-exact comparisons and poison checks.
template <typename Element>
uint16_t bits_of(Element x) {
    static_assert(sizeof(Element) == 2, "16-bit elements");
    uint16_t b;
    std::memcpy(&b, &x, sizeof(b));
    return b;
}

// C[M, N] = A[M, K] * B[K, N] (+ C when accumulate), all row-major, in double.
inline std::vector<double> matmul(const std::vector<float>& a, const std::vector<float>& b, int m, int n, int k) {
    std::vector<double> c(static_cast<size_t>(m) * n, 0.0);
    for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int kk = 0; kk < k; ++kk) acc += static_cast<double>(a[i * k + kk]) * b[kk * n + j];
            c[i * n + j] = acc;
        }
    }
    return c;
}

}  // namespace unit
