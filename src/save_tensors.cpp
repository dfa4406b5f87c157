#include "save_tensors.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "check.h"
#include "dispatch.h"
#include "npy.h"

namespace fmha {
namespace {

// Writes DIR/name; exits 2 when it cannot.
template <class T>
void write_array(const std::string& dir, const char* name, const T* data, const std::vector<int64_t>& shape) {
    const std::string path = dir + "/" + name;
    if (!write_npy(path, data, shape)) fail_args("-save-tensors: cannot write " + path);
}

// Gathers one strided tensor into [b, s_cap, heads, cols] float32 and writes it.
void save_one(const std::string& dir, const char* name, const void* src, DataType type,
              int64_t row_stride, int64_t head_stride, int heads, int cols, const int* offsets,
              const int* lens, int b, int s_cap, cudaStream_t stream) {
    const size_t n = size_t(b) * s_cap * heads * cols;
    DeviceBuffer<float> dense(n);
    gather_logical(src, type, row_stride, head_stride, heads, cols, offsets, lens, b, s_cap,
                   dense.get(), stream);
    std::vector<float> host(n);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), dense.get(), dense.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    write_array(dir, name, host.data(), {b, s_cap, heads, cols});
}

// `bytes` of fp16, bf16 or e4m3 elements on the device as floats on the host.
std::vector<float> download_floats(const void* data, size_t bytes, DataType type, cudaStream_t stream) {
    std::vector<uint8_t> raw(bytes);
    CUDA_CHECK(cudaMemcpyAsync(raw.data(), data, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (type == DataType::kE4m3) {
        std::vector<float> out(bytes);
        for (size_t i = 0; i < bytes; ++i) out[i] = e4m3_bits_to_float(raw[i]);
        return out;
    }
    const BitsToFloat to_float = bits_to_float(type);
    std::vector<float> out(bytes / 2);
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_float(uint16_t(raw[2 * i] | (raw[2 * i + 1] << 8)));
    return out;
}

// Softmax statistics [b, h, s_q_max] on the device -> lse-style [b, h, s_q] float32 file,
// rows past a sequence's length zero (as in o.npy).
void save_lse(const std::string& dir, const char* name, const float* src, const Problem& p, const SeqLens& lens,
              cudaStream_t stream) {
    std::vector<float> dense(size_t(p.b) * p.h * lens.s_q_max);
    CUDA_CHECK(cudaMemcpyAsync(dense.data(), src, dense.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> out(size_t(p.b) * p.h * p.s_q, 0.f);
    for (int seq = 0; seq < p.b; ++seq)
        for (int head = 0; head < p.h; ++head)
            for (int row = 0; row < lens.q_lens[seq]; ++row)
                out[(size_t(seq) * p.h + head) * p.s_q + row] = dense[(size_t(seq) * p.h + head) * lens.s_q_max + row];
    write_array(dir, name, out.data(), {p.b, p.h, p.s_q});
}

// The bias [b|1, h|1, s_q_max, s_kv_max] on the device -> [b|1, h|1, s_q, s] float32, entries
// past a sequence's lengths zero (a broadcast batch: the largest lengths of the batch).
void save_bias(const std::string& dir, const Problem& p, const SeqLens& lens, const DeviceTensors& t,
               cudaStream_t stream) {
    const int nb = p.bias_per_batch ? p.b : 1, nh = p.bias_per_head ? p.h : 1;
    const size_t plane = size_t(lens.s_q_max) * lens.s_kv_max;
    const std::vector<float> bias = download_floats(t.variants.bias.get(), t.variants.bias.bytes(), p.dtype, stream);
    std::vector<float> out(size_t(nb) * nh * p.s_q * p.s, 0.f);
    for (int bi = 0; bi < nb; ++bi) {
        const int q_len = p.bias_per_batch ? lens.q_lens[bi] : lens.s_q_max;
        const int kv_len = p.bias_per_batch ? lens.kv_lens[bi] : lens.s_kv_max;
        for (int hi = 0; hi < nh; ++hi)
            for (int r = 0; r < q_len; ++r)
                for (int j = 0; j < kv_len; ++j)
                    out[((size_t(bi) * nh + hi) * p.s_q + r) * p.s + j] =
                        bias[(size_t(bi) * nh + hi) * plane + size_t(r) * lens.s_kv_max + j];
    }
    write_array(dir, "bias.npy", out.data(), {nb, nh, p.s_q, p.s});
}

// The custom mask -> int32 [b, s_q, s], 1 where the key is visible (past the lengths: 0).
void save_custom_mask(const std::string& dir, const Problem& p, const SeqLens& lens, const CustomMask& m) {
    std::vector<int32_t> out(size_t(p.b) * p.s_q * p.s, 0);
    for (int bi = 0; bi < p.b; ++bi)
        for (int r = 0; r < lens.q_lens[bi]; ++r)
            for (int j = 0; j < lens.kv_lens[bi]; ++j) out[(size_t(bi) * p.s_q + r) * p.s + j] = m.visible(bi, r, j);
    write_array(dir, "custom_mask.npy", out.data(), {p.b, p.s_q, p.s});
}

// -paged-kv: the pool as it is on the device, split into k_pool.npy [blocks, h_kv,
// tokens_per_block, d] and v_pool.npy [blocks, h_kv, tokens_per_block, dv] (spare blocks are
// the poison's NaN), and block_table.npy int32 [b, blocks of the longest sequence] (-1 past
// a sequence's blocks).
void save_paged_kv(const std::string& dir, const Problem& p, const DeviceTensors& t, cudaStream_t stream) {
    const PagedKv& g = t.paged.host;
    const std::vector<float> pool = download_floats(t.paged.pool.get(), t.paged.pool.bytes(), p.kv_dtype, stream);
    const size_t k_part = size_t(p.h_kv) * g.tokens_per_block * p.d;
    const size_t v_part = size_t(p.h_kv) * g.tokens_per_block * p.dv;
    std::vector<float> k(size_t(g.pool_blocks) * k_part), v(size_t(g.pool_blocks) * v_part);
    for (size_t blk = 0; blk < size_t(g.pool_blocks); ++blk) {
        const float* block = pool.data() + blk * (k_part + v_part);
        std::copy(block, block + k_part, k.begin() + blk * k_part);
        std::copy(block + k_part, block + k_part + v_part, v.begin() + blk * v_part);
    }
    write_array(dir, "k_pool.npy", k.data(), {g.pool_blocks, p.h_kv, g.tokens_per_block, p.d});
    write_array(dir, "v_pool.npy", v.data(), {g.pool_blocks, p.h_kv, g.tokens_per_block, p.dv});
    write_array(dir, "block_table.npy", g.table.data(), {p.b, g.table_stride});
}

}  // namespace

void prepare_save_dir(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir, ec))
        fail_args("-save-tensors: cannot create directory '" + dir + "'" +
                  (ec ? ": " + ec.message() : std::string()));
}

void save_tensors(const Problem& p, const SeqLens& lens, const DeviceTensors& t, const float* o_ref,
                  const float* lse_ref, const KernelMeta& kernel, cudaStream_t stream) {
    const Params& q = t.logical;  // K and V in token storage, also with -paged-kv
    // The offsets and lengths as arrays (Params leaves them null where the sequences are full).
    const int *q_off = t.q_offsets.get(), *q_len = t.q_lens.get(), *kv_off = t.kv_offsets.get(),
              *kv_len = t.kv_lens.get();
    const std::string& dir = p.save_dir;
    save_one(dir, "q.npy", q.q, p.dtype, q.q_row_stride, q.q_head_stride, p.h, p.d, q_off,
             q_len, p.b, p.s_q, stream);
    save_one(dir, "k.npy", q.k, p.kv_dtype, q.k_row_stride, q.k_head_stride, p.h_kv, p.d,
             kv_off, kv_len, p.b, p.s, stream);
    save_one(dir, "v.npy", q.v, p.kv_dtype, q.v_row_stride, q.v_head_stride, p.h_kv, p.dv,
             kv_off, kv_len, p.b, p.s, stream);
    save_one(dir, "o.npy", q.o, p.out_dtype, q.o_row_stride, q.o_head_stride, p.h, p.dv, q_off,
             q_len, p.b, p.s_q, stream);
    if (o_ref != nullptr)  // dense [q storage tokens, h, dv]
        save_one(dir, "o_ref.npy", o_ref, DataType::kFp32, int64_t(p.h) * p.dv, p.dv, p.h, p.dv,
                 q_off, q_len, p.b, p.s_q, stream);
    write_array(dir, "seqlens_q.npy", lens.q_lens.data(), {p.b});
    write_array(dir, "seqlens_kv.npy", lens.kv_lens.data(), {p.b});
    const std::vector<float>& sinks = t.variants.sinks_host;
    if (!sinks.empty()) write_array(dir, "sinks.npy", sinks.data(), {static_cast<int64_t>(sinks.size())});  // [h]
    if (t.lse.size() > 0) save_lse(dir, "lse.npy", t.lse.get(), p, lens, stream);
    if (lse_ref != nullptr) save_lse(dir, "lse_ref.npy", lse_ref, p, lens, stream);
    if (p.attention_bias) save_bias(dir, p, lens, t, stream);
    if (p.mask == MaskType::kCustom) save_custom_mask(dir, p, lens, t.variants.custom_mask_host);
    if (p.layout == Layout::kPagedKv) save_paged_kv(dir, p, t, stream);

    JsonObject meta;
    meta.add("kernel", kernel.name)
        .add("dtype", dtype_name(p.dtype))
        .add("acc", dtype_name(kernel.acc))  // what ran: fp32 also serves a problem asking for fp16
        .add("output_dtype", dtype_name(p.out_dtype))
        .add("kv_dtype", dtype_name(p.kv_dtype))  // -kv-e4m3: k.npy, v.npy hold the e4m3 values
        .add("mask", mask_label(p.mask))
        .add("layout", layout_label(p.layout))
        .add("attn", attn_label(p))
        .add("b", p.b)
        .add("h", p.h)
        .add("h_kv", p.h_kv)
        .add("d", p.d)
        .add("dv", p.dv)
        .add("s", p.s)
        .add("s_q", p.s_q)
        .add("min_s", p.min_s)
        .add("pad_s", p.pad_s)
        .add("scale_bmm1", double(p.scale_bmm1))
        .add("scale_softmax", double(p.scale_softmax))
        .add("scale_bmm2", double(p.scale_bmm2))
        .add("seed", p.seed)
        .add("inputs", p.ones ? "ones" : p.randn ? "randn" : "uniform")
        .add("range_q", double(p.range_q))
        .add("range_k", double(p.range_k))
        .add("range_v", double(p.range_v))
        .add("scale_q", double(p.scale_q))
        .add("scale_k", double(p.scale_k))
        .add("scale_v", double(p.scale_v))
        .add("epsilon", double(p.epsilon))
        .add("o_ref_saved", o_ref != nullptr)
        .add("bidirectional_sliding_window", p.mask == MaskType::kBidirectionalWindow)
        .add("softcapping_scale_bmm1", double(p.softcapping_scale_bmm1))
        .add("dropout_p", double(p.dropout_p))
        .add("alibi", p.alibi)
        .add("attention_bias", p.attention_bias)
        .add("attention_bias_shape", !p.attention_bias ? "" : std::string(p.bias_per_batch ? "b" : "1") + (p.bias_per_head ? "h" : "1"))
        .add("attention_sinks", p.attention_sinks)
        .add("save_softmax", p.save_softmax)
        .add("paged_kv", p.layout == Layout::kPagedKv)
        .add("tokens_per_block", p.layout == Layout::kPagedKv ? p.tokens_per_block : 0)
        // e4m3: the key block whose exact running max sets P's rounding grid (reference.h).
        .add("p_block_keys", p.dtype == DataType::kE4m3 ? block_n_that_runs(kernel, t.params) : 0)
        .add("bwd", p.bwd);  // -bwd: do.npy, dq.npy, dk.npy, dv.npy and their _ref files follow
    if (p.sliding_window_size > 0) meta.add("sliding_window_size", p.sliding_window_size);
    else meta.null("sliding_window_size");
    if (p.chunked_attention_size > 0) meta.add("chunked_attention_size", p.chunked_attention_size);
    else meta.null("chunked_attention_size");
    const std::string path = dir + "/meta.json";
    if (!meta.write(path)) fail_args("-save-tensors: cannot write " + path);
}

void save_backward(const Problem& p, const DeviceTensors& t, const void* d_o, const void* dq, const void* dk,
                   const void* dv, const float* dq_ref, const float* dk_ref, const float* dv_ref, cudaStream_t stream) {
    const Params& q = t.logical;
    const int *q_off = t.q_offsets.get(), *q_len = t.q_lens.get(), *kv_off = t.kv_offsets.get(),
              *kv_len = t.kv_lens.get();
    const std::string& dir = p.save_dir;
    const int64_t hd = int64_t(p.h) * p.d, kvd = int64_t(p.h_kv) * p.d, kvdv = int64_t(p.h_kv) * p.dv;
    save_one(dir, "do.npy", d_o, p.dtype, q.o_row_stride, q.o_head_stride, p.h, p.dv, q_off, q_len, p.b, p.s_q,
             stream);
    save_one(dir, "dq.npy", dq, p.dtype, hd, p.d, p.h, p.d, q_off, q_len, p.b, p.s_q, stream);
    save_one(dir, "dk.npy", dk, p.dtype, kvd, p.d, p.h_kv, p.d, kv_off, kv_len, p.b, p.s, stream);
    save_one(dir, "dv.npy", dv, p.dtype, kvdv, p.dv, p.h_kv, p.dv, kv_off, kv_len, p.b, p.s, stream);
    if (dq_ref == nullptr) return;
    save_one(dir, "dq_ref.npy", dq_ref, DataType::kFp32, hd, p.d, p.h, p.d, q_off, q_len, p.b, p.s_q, stream);
    save_one(dir, "dk_ref.npy", dk_ref, DataType::kFp32, kvd, p.d, p.h_kv, p.d, kv_off, kv_len, p.b, p.s, stream);
    save_one(dir, "dv_ref.npy", dv_ref, DataType::kFp32, kvdv, p.dv, p.h_kv, p.dv, kv_off, kv_len, p.b, p.s, stream);
}

}  // namespace fmha
