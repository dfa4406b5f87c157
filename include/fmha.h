/* FMHA_v2's C API: fused multi-head attention on NVIDIA GPUs (lib/libfmha.so).
 *
 *   fmha_problem_t p;  fmha_problem_init(&p);      sizes, dtypes, tensors, mask, options
 *   fmha_plan_t plan;  fmha_plan(&p, 0, 0, &plan);  choose the kernel, size the workspace
 *   fmha_forward(&p, &plan, workspace, plan.workspace_bytes, stream);
 *
 * and for training, with the forward's O and LSE in p.o and p.lse:
 *
 *   fmha_backward_args_t g;  fmha_backward_args_init(&g);   dO in, dQ, dK, dV out
 *   fmha_plan_backward(&p, &g, 0, 0, &plan);
 *   fmha_backward(&p, &g, &plan, workspace, plan.workspace_bytes, stream);
 *
 * Every call returns a status; on failure fmha_last_error() gives a one-line reason (per
 * thread). Nothing prints, exits or aborts. fmha_forward is stream-ordered on the caller's
 * stream: it allocates nothing, never synchronises, does host work independent of the
 * problem's size, may be captured in a CUDA graph and called from several threads at once.
 *
 * Tensors are addressed as data + token * token_stride + head * head_stride + column, in
 * elements. Sequences either have fixed lengths (cu_seqlens_* NULL: sequence i starts at
 * token i * batch_stride / token_stride, torch's [b, s, h, d]) or are packed (cu_seqlens_*:
 * b + 1 device int32 prefix sums, FlashAttention's var-len [total, h, d]). Queries are the
 * last q_len positions of their sequence: causal and window masks are bottom-right aligned.
 */
#ifndef FMHA_H_
#define FMHA_H_

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct or a signature changes; fmha_version() returns the library's. */
#define FMHA_API_VERSION 6

typedef enum fmha_status {
    FMHA_SUCCESS = 0,
    FMHA_ERROR_INVALID_VALUE = 1, /* a field is out of range or contradicts another */
    FMHA_ERROR_NOT_SUPPORTED = 2, /* a valid problem no kernel of this build serves */
    FMHA_ERROR_WORKSPACE = 3,     /* workspace NULL, too small or not 256-byte aligned */
    FMHA_ERROR_CUDA = 4           /* a CUDA call failed; the message names it */
} fmha_status_t;

typedef enum fmha_dtype {
    FMHA_DTYPE_FP16 = 0,
    FMHA_DTYPE_BF16 = 1,
    FMHA_DTYPE_FP32 = 2, /* accumulation only */
    FMHA_DTYPE_E4M3 = 3  /* FP8 Q, K, V (Hopper); O is bf16 */
} fmha_dtype_t;

/* With p = r + (kv_len - q_len) the position of query row r among the keys, key j is
 * visible to row r iff: NONE always; CAUSAL j <= p; SLIDING_WINDOW p - window < j <= p;
 * BIDIRECTIONAL_WINDOW p - window < j < p + window; CHUNKED j <= p and j / chunk == p /
 * chunk (chunk a power of two); CUSTOM bit j of row r in custom_mask. */
typedef enum fmha_mask {
    FMHA_MASK_NONE = 0,
    FMHA_MASK_CAUSAL = 1,
    FMHA_MASK_SLIDING_WINDOW = 2,
    FMHA_MASK_BIDIRECTIONAL_WINDOW = 3,
    FMHA_MASK_CHUNKED = 4,
    FMHA_MASK_CUSTOM = 5
} fmha_mask_t;

typedef struct fmha_tensor {
    void* data;           /* device memory, 16-byte aligned */
    int64_t batch_stride; /* fixed lengths: elements from one sequence to the next */
    int64_t token_stride; /* elements from one token to the next (a multiple of 8) */
    int64_t head_stride;  /* elements from one head to the next (a multiple of 8) */
} fmha_tensor_t;

typedef struct fmha_problem {
    uint32_t struct_size; /* sizeof(fmha_problem_t), set by fmha_problem_init */
    fmha_dtype_t dtype;   /* of Q, K, V and O: FP16 or BF16; E4M3: Q, K, V, and O in BF16 (or o_e4m3) */
    fmha_dtype_t acc;     /* P V accumulation: FP32 (default) or FP16 */
    int b, h, h_kv;       /* batch, query heads, key/value heads (h % h_kv == 0) */
    int d, dv;            /* head size of Q and K, of V and O */
    int max_s_q, max_s_kv; /* longest sequence of queries, of keys */

    const int32_t* cu_seqlens_q; /* device [b + 1] or NULL (fixed: every sequence max_s_q) */
    const int32_t* cu_seqlens_k; /* device [b + 1] or NULL (fixed: max_s_kv) */
    const int32_t* seqused_k;    /* device [b]: keys each sequence uses, or NULL (all) */
    int64_t q_tokens, kv_tokens; /* tokens the Q/O and K/V storage hold; 0: from fixed
                                    lengths (b * batch_stride / token_stride); required
                                    with cu_seqlens_* */

    fmha_tensor_t q, k, v, o;

    fmha_mask_t mask;
    int window; /* SLIDING_WINDOW, BIDIRECTIONAL_WINDOW: keys on each side, >= 1 */
    int chunk;  /* CHUNKED: a power of two */
    const uint32_t* custom_mask; /* CUSTOM: device bits [b][max_s_q][custom_mask_row_words] */
    int custom_mask_row_words;   /* >= ceil(max_s_kv / 32) */

    float scale;   /* of Q K^T; 0: 1 / sqrt(d) */
    float softcap; /* S = softcap * tanh(S / softcap) when > 0 */
    int wide_logits; /* nonzero when scale * |q.k| * log2(e) may reach 2^24 (kernels that
                        keep an exact integer row max refuse it) */
    const float* alibi_slopes; /* device [h] or NULL */
    const float* sinks;        /* device [h]: a logit per head added to the denominator */
    const void* bias;          /* device [b or 1][h or 1][max_s_q][bias_row_stride], dtype */
    int64_t bias_batch_stride, bias_head_stride, bias_row_stride; /* 0 broadcasts */

    /* Paged KV cache (block_table != NULL): key j of sequence i, head g at
     * k.data + block_table[i * block_table_stride + j / block_size] * k_block_stride
     *        + (j % block_size) * k.token_stride + g * k.head_stride  (V alike);
     * lengths from seqused_k (or max_s_kv), cu_seqlens_k unused. */
    const int32_t* block_table;
    int block_table_stride;
    int block_size; /* a power of two >= 16 */
    int num_blocks; /* blocks in the pool */
    int64_t k_block_stride, v_block_stride;

    float* lse; /* optional out: fp32 [b][h][max_s_q], natural log of each row's sum of
                   exp(scaled logits); -inf for a row that sees no key; NULL: not written */

    /* E4M3 (and kv_e4m3: k_descale, v_descale) only: dequantisation factors, device fp32
     * [b][h_kv] each (FlashAttention-3's q/k/v_descale), NULL: 1; positive (the kernels fold
     * them into the softmax's scale). Q K^T is scaled by q_descale * k_descale (and `scale`), O
     * by v_descale. E4M3 strides are multiples of 16 elements. */
    const float* q_descale;
    const float* k_descale;
    const float* v_descale;
    int o_e4m3; /* E4M3 only: nonzero writes O in e4m3 (fmha_v2's output: rounded to nearest,
                   saturating at +-448; v_descale scales it into range), else in BF16 */

    /* Dropout (training): each probability that multiplies V is dropped with probability
     * dropout_p in [0, 1) (used as a multiple of 2^-16), the kept ones scaled by 1 / (1 - p);
     * the LSE is unchanged. Which ones is a function of (dropout_seed, dropout_offset, sequence,
     * query head, query row, key) alone (src/fmha/dropout.h): fmha_backward with the same
     * fields regenerates the forward's mask. 0: off. FP16 and BF16, without softcap, ALiBi,
     * bias or a custom mask. */
    float dropout_p;
    uint64_t dropout_seed;
    uint64_t dropout_offset;

    /* Nonzero: K and V are FP8 e4m3 (an e4m3 KV cache) under FP16 or BF16 Q and O, with
     * k_descale and v_descale as above; their strides (and block strides) are multiples of 16
     * elements. Served by the decode kernels (max_s_q <= 16), forward only. */
    int kv_e4m3;
} fmha_problem_t;

typedef struct fmha_plan {
    char kernel[128];       /* the kernel (tile) that will run */
    size_t workspace_bytes; /* what fmha_forward needs */
    int sm;                 /* the arch it was planned for, e.g. 90 */
    int num_sms;
    int index;              /* internal: the registry row */
} fmha_plan_t;

/* FMHA_API_VERSION of the library. */
int fmha_version(void);

/* The reason of the calling thread's last failure ("" after a success). */
const char* fmha_last_error(void);

/* Zeroes the problem, sets struct_size, acc = FP32 and window/chunk/scale defaults. */
void fmha_problem_init(fmha_problem_t* problem);

/* Chooses the kernel for a device of arch sm (e.g. 90) with num_sms SMs, without touching
 * it; sm = 0 or num_sms = 0: the current device's. Checks the problem (not device memory). */
fmha_status_t fmha_plan(const fmha_problem_t* problem, int sm, int num_sms, fmha_plan_t* plan);

/* Runs the attention on stream. plan: from fmha_plan for this problem, or NULL to plan here.
 * workspace: >= plan.workspace_bytes bytes of device memory, 256-byte aligned, zero-filled
 * before its first use; every call leaves the parts that must start at zero (counters) at zero,
 * so later calls on the same stream may reuse it (one workspace per stream). */
fmha_status_t fmha_forward(const fmha_problem_t* problem, const fmha_plan_t* plan, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream);

/* The backward pass's own tensors. The problem is the forward's: q, k, v its inputs, o its
 * output and lse (required) its LSE. Each tensor has strides of its own; with fixed lengths
 * its batch_stride holds the same number of tokens as its forward tensor's (d_o and dq as
 * o's and q's, dk and dv as k's). */
typedef struct fmha_backward_args {
    uint32_t struct_size;     /* sizeof(fmha_backward_args_t), set by fmha_backward_args_init */
    fmha_tensor_t d_o;        /* dL/dO, O's dtype and shape */
    const float* d_lse;       /* dL/dlse, the layout of problem.lse, or NULL (zero) */
    fmha_tensor_t dq, dk, dv; /* out: dL/dQ, dL/dK, dL/dV in the inputs' dtype (dK, dV summed
                                 over the query heads of each KV head) */
    int deterministic;        /* nonzero: bitwise the same results from run to run (dQ added in
                                 a fixed order, at some cost in time) */
} fmha_backward_args_t;

/* Zeroes the arguments and sets struct_size. */
void fmha_backward_args_init(fmha_backward_args_t* args);

/* fmha_plan for the backward pass: FMHA_ERROR_NOT_SUPPORTED names what no backward kernel
 * serves (today fp16 and bf16, d and dv multiples of 8 up to 256, every mask but the custom
 * one, softcap, ALiBi and sinks (not their own gradients), dropout; no bias, paged cache or
 * seqused_k; sm_80 and later). */
fmha_status_t fmha_plan_backward(const fmha_problem_t* problem, const fmha_backward_args_t* args, int sm,
                                 int num_sms, fmha_plan_t* plan);

/* dQ, dK, dV on stream, as fmha_forward runs (no allocation, no synchronisation). workspace:
 * >= plan.workspace_bytes, 256-byte aligned, any content (the call clears what it uses). */
fmha_status_t fmha_backward(const fmha_problem_t* problem, const fmha_backward_args_t* args, const fmha_plan_t* plan,
                            void* workspace, size_t workspace_bytes, cudaStream_t stream);

/* The kernels of this build: count, and row i's name (NULL past the end). */
int fmha_num_kernels(void);
const char* fmha_kernel_name(int i);

#ifdef __cplusplus
}
#endif

#endif /* FMHA_H_ */
