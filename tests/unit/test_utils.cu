// src/fmha/utils.h: FastDiv against the division operator, on the host and on the device
// (the kernels' __umulhi path), for every divisor up to 4096 and the divisors near powers
// of two up to 2^30, over dividends at the edges (0, multiples of d and their neighbours,
// 2^31 - 1) and a spread in between.
#include <vector>

#include "fmha/utils.h"
#include "unit_test.h"

namespace {

std::vector<int> divisors() {
    std::vector<int> ds;
    for (int d = 1; d <= 4096; ++d) ds.push_back(d);
    for (int l = 13; l <= 30; ++l) {
        for (int e = -2; e <= 2; ++e) ds.push_back((1 << l) + e);
    }
    ds.push_back(2147483647);
    return ds;
}

std::vector<int> dividends(int d) {
    std::vector<int> ns = {0, 1, 2, 3, d - 1, d, d + 1, 2147483647, 2147483646};
    for (int k : {2, 3, 1000, 65535}) {
        const long long m = static_cast<long long>(d) * k;
        for (long long e = -1; e <= 1; ++e) {
            if (m + e >= 0 && m + e <= 2147483647) ns.push_back(static_cast<int>(m + e));
        }
    }
    for (int i = 0; i < 32; ++i) ns.push_back(static_cast<int>((2147483647ull * i) / 31));
    std::vector<int> ok;
    for (int n : ns) {
        if (n >= 0) ok.push_back(n);
    }
    return ok;
}

__global__ void div_kernel(const fmha::FastDiv* divs, const int* n, const int* which, int count, int* q, int* r) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const fmha::FastDiv f = divs[which[i]];
    q[i] = f.div(n[i]);
    r[i] = f.mod(n[i], q[i]);
}

// The host path (runs without a GPU, too).
TEST(FastDivHost, MatchesDivision) {
    for (int d : divisors()) {
        const fmha::FastDiv f(d);
        for (int n : dividends(d)) {
            const int q = f.div(n);
            ASSERT_EQ(q, n / d) << n << " / " << d;
            ASSERT_EQ(f.mod(n, q), n % d) << n << " % " << d;
        }
    }
}

class FastDiv : public unit::DeviceTest {};

TEST_F(FastDiv, MatchesDivisionOnTheDevice) {
    const std::vector<int> ds = divisors();
    std::vector<fmha::FastDiv> divs;
    std::vector<int> n, which;
    for (size_t j = 0; j < ds.size(); ++j) {
        divs.emplace_back(ds[j]);
        for (int x : dividends(ds[j])) {
            n.push_back(x);
            which.push_back(static_cast<int>(j));
        }
    }
    const int count = static_cast<int>(n.size());
    unit::DeviceBuffer<fmha::FastDiv> d_divs;
    unit::DeviceBuffer<int> d_n, d_which, d_q, d_r;
    CUDA_ASSERT(d_divs.upload(divs));
    CUDA_ASSERT(d_n.upload(n));
    CUDA_ASSERT(d_which.upload(which));
    CUDA_ASSERT(d_q.alloc(count));
    CUDA_ASSERT(d_r.alloc(count));
    div_kernel<<<(count + 255) / 256, 256>>>(d_divs.get(), d_n.get(), d_which.get(), count, d_q.get(), d_r.get());
    CUDA_ASSERT_LAUNCH();
    std::vector<int> q, r;
    CUDA_ASSERT(d_q.download(&q));
    CUDA_ASSERT(d_r.download(&r));
    int bad = 0;
    for (int i = 0; i < count && bad < 10; ++i) {
        const int d = ds[which[i]];
        if (q[i] != n[i] / d || r[i] != n[i] % d) {
            ADD_FAILURE() << n[i] << " / " << d << ": device " << q[i] << " r " << r[i];
            ++bad;
        }
    }
}

}  // namespace
