/* The C API from C: causal bf16 attention over [b, s, h, d] tensors. V is all ones, so every
 * output element must be 1.0 whatever the attention weights, up to P's rounding to bf16
 * before P V (the row sum is fp32): the program checks |o - 1| <= 2^-6.
 *
 *   make lib && nvcc examples/capi_forward.c -Iinclude -Llib -lfmha -Xlinker -rpath,lib -o capi_forward
 *   ./capi_forward        exit 0: checked; 1: a wrong output; 2: refused; 3: CUDA error
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "fmha.h"

enum { B = 2, S = 256, H = 8, D = 128 };
static const uint16_t kBf16One = 0x3F80;

static float bf16_to_float(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } x;
    x.u = (uint32_t)h << 16;
    return x.f;
}

static int cuda_failed(cudaError_t err, const char* what) {
    if (err == cudaSuccess) return 0;
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    return 1;
}

int main(void) {
    const size_t elems = (size_t)B * S * H * D;
    uint16_t* host = (uint16_t*)malloc(elems * sizeof(uint16_t));
    void *q = NULL, *k = NULL, *v = NULL, *o = NULL, *workspace = NULL;
    int status = 0;
    for (size_t i = 0; i < elems; ++i) host[i] = (uint16_t)(0x3C00 + (i * 2654435761u >> 24) % 512); /* 2^-7 .. 2^-3 */
    if (cuda_failed(cudaMalloc(&q, elems * 2), "cudaMalloc") || cuda_failed(cudaMalloc(&k, elems * 2), "cudaMalloc") ||
        cuda_failed(cudaMalloc(&v, elems * 2), "cudaMalloc") || cuda_failed(cudaMalloc(&o, elems * 2), "cudaMalloc") ||
        cuda_failed(cudaMemcpy(q, host, elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy") ||
        cuda_failed(cudaMemcpy(k, host, elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy")) {
        free(host);
        return 3;
    }
    for (size_t i = 0; i < elems; ++i) host[i] = kBf16One;
    if (cuda_failed(cudaMemcpy(v, host, elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy")) return 3;

    fmha_problem_t p;
    fmha_problem_init(&p);
    p.dtype = FMHA_DTYPE_BF16;
    p.b = B, p.h = H, p.h_kv = H, p.d = D, p.dv = D, p.max_s_q = S, p.max_s_kv = S;
    const fmha_tensor_t layout = {NULL, (int64_t)S * H * D, (int64_t)H * D, D}; /* [b, s, h, d] */
    p.q = layout, p.q.data = q;
    p.k = layout, p.k.data = k;
    p.v = layout, p.v.data = v;
    p.o = layout, p.o.data = o;
    p.mask = FMHA_MASK_CAUSAL;

    fmha_plan_t plan;
    fmha_status_t s = fmha_plan(&p, 0, 0, &plan);
    if (s != FMHA_SUCCESS) {
        fprintf(stderr, "fmha_plan: %s\n", fmha_last_error());
        return s == FMHA_ERROR_CUDA ? 3 : 2;
    }
    if (cuda_failed(cudaMalloc(&workspace, plan.workspace_bytes), "cudaMalloc") ||
        cuda_failed(cudaMemset(workspace, 0, plan.workspace_bytes), "cudaMemset"))
        return 3;
    s = fmha_forward(&p, &plan, workspace, plan.workspace_bytes, 0);
    if (s != FMHA_SUCCESS) {
        fprintf(stderr, "fmha_forward: %s\n", fmha_last_error());
        return s == FMHA_ERROR_CUDA ? 3 : 2;
    }
    if (cuda_failed(cudaMemcpy(host, o, elems * 2, cudaMemcpyDeviceToHost), "cudaMemcpy")) return 3;
    size_t wrong = 0;
    for (size_t i = 0; i < elems; ++i) {
        const float x = bf16_to_float(host[i]);
        wrong += !(x >= 1.f - 1.f / 64 && x <= 1.f + 1.f / 64);
    }
    printf("kernel %s, workspace %zu bytes: %zu of %zu outputs off 1.0 by more than 2^-6\n", plan.kernel,
           plan.workspace_bytes, wrong, elems);
    status = wrong == 0 ? 0 : 1;
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(workspace);
    free(host);
    return status;
}
