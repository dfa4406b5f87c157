#include "tensors.h"

#include <algorithm>

namespace fmha {
namespace {

// Params of the problem with Q, K, V and O as `t` stores them: pointers, strides, lengths,
// sizes, the mask and the scales (the variants and the paged pool set their own fields).
Params tensor_params(const Problem& p, const SeqLens& lens, const DeviceTensors& t) {
    const View& q = t.storage.q_view;
    const View& k = t.storage.k_view;
    const View& v = t.storage.v_view;
    const int64_t h = p.h, dv = p.dv;
    Params prm;
    prm.q = q.base;
    prm.k = k.base;
    prm.v = v.base;
    // O's elements are 2 bytes, or 1 for e4m3 O (the allocation is as large either way).
    prm.o = reinterpret_cast<char*>(t.o.get()) + kGuardRows * h * dv * element_bytes(p.out_dtype);
    prm.o_e4m3 = p.out_dtype == DataType::kE4m3;
    prm.q_row_stride = q.row_stride;
    prm.q_head_stride = q.head_stride;
    prm.k_row_stride = k.row_stride;
    prm.k_head_stride = k.head_stride;
    prm.v_row_stride = v.row_stride;
    prm.v_head_stride = v.head_stride;
    prm.o_row_stride = h * dv;
    prm.o_head_stride = dv;
    if (uniform_lengths(lens)) {  // the kernels take offsets and lengths from the index
        prm.q_step = lens.s_q_max;
        prm.kv_step = lens.s_kv_max;
    } else {
        prm.q_offsets = t.q_offsets.get();
        prm.q_lens = t.q_lens.get();
        prm.kv_offsets = t.kv_offsets.get();
        prm.kv_lens = t.kv_lens.get();
    }
    prm.tile_counter = t.tile_counter.get();
    prm.q_tokens = lens.q_storage_tokens;  // packed QKV: q_tokens == kv_tokens, the qkv buffer's rows
    prm.kv_tokens = lens.kv_storage_tokens;
    prm.b = p.b;
    prm.h = p.h;
    prm.h_kv = p.h_kv;
    prm.d = p.d;
    prm.dv = p.dv;
    prm.s_q_max = lens.s_q_max;
    prm.s_kv_max = lens.s_kv_max;
    prm.mask = p.mask;
    prm.window = p.sliding_window_size;
    prm.chunk = p.chunked_attention_size;
    prm.scale_bmm1 = p.scale_bmm1;
    prm.scale_softmax = p.scale_softmax;
    prm.scale_bmm2 = p.scale_bmm2;
    prm.softcap = p.softcapping_scale_bmm1;
    prm.wide_logits = p.wide_logits;
    prm.dropout = dropout::make(p.dropout_p, p.seed, 0);  // the inputs' seed: a run is reproducible from its flags
    if (t.lse.size() > 0) prm.softmax_lse = t.lse.get();
    return prm;
}

bool contains(const DeviceBuffer<uint8_t>& b, const void* ptr) {
    const auto* base = reinterpret_cast<const char*>(b.get());
    const auto* at = static_cast<const char*>(ptr);
    return b.size() > 0 && at >= base && at < base + b.bytes();
}

}  // namespace

DeviceTensors make_tensors(const Problem& p, const SeqLens& lens) {
    DeviceTensors t;
    t.q_offsets = to_device(lens.q_offsets);
    t.q_lens = to_device(lens.q_lens);
    t.kv_offsets = to_device(lens.kv_offsets);
    t.kv_lens = to_device(lens.kv_lens);
    t.tile_counter = to_device(std::vector<int>{0});  // persistent kernels' counter, starts at 0
    t.storage = make_qkv_storage(p, lens);
    t.o = DeviceBuffer<uint16_t>(static_cast<size_t>((lens.q_storage_tokens + 2 * kGuardRows) * p.h * p.dv));
    if (p.save_softmax) t.lse = DeviceBuffer<float>(size_t(p.b) * p.h * lens.s_q_max);

    const QkvStorage& s = t.storage;
    fill_view(p, s.q_view, t.q_offsets.get(), t.q_lens.get(), p.s_q, kStreamQ, p.range_q, p.scale_q);
    fill_view(p, s.k_view, t.kv_offsets.get(), t.kv_lens.get(), p.s, kStreamK, p.range_k, p.scale_k);
    fill_view(p, s.v_view, t.kv_offsets.get(), t.kv_lens.get(), p.s, kStreamV, p.range_v, p.scale_v);
    CUDA_CHECK(cudaDeviceSynchronize());

    t.params = tensor_params(p, lens, t);
    t.variants = make_variants(p, lens, t.params);
    // What the reference and -save-tensors read: K and V in token storage. -paged-kv then
    // builds the pool from them and points the kernel's K and V there.
    t.logical = t.params;
    if (p.layout == Layout::kPagedKv)
        t.paged = make_paged_pool(p, lens, s, t.kv_offsets.get(), t.kv_lens.get(), t.params);
    return t;
}

std::vector<Params> timing_input_sets(const DeviceTensors& t, size_t l2_bytes,
                                      std::vector<DeviceBuffer<uint8_t>>* copies) {
    // The buffers the kernel reads (with -paged-kv, the pool and not the logical K/V).
    std::vector<const DeviceBuffer<uint8_t>*> inputs;
    const QkvStorage& s = t.storage;
    for (const auto* b : {&s.qkv, &s.q, &s.kv, &s.k, &s.v, &t.paged.pool})
        if (contains(*b, t.params.q) || contains(*b, t.params.k) || contains(*b, t.params.v)) inputs.push_back(b);
    size_t bytes = 0;
    for (const auto* b : inputs) bytes += b->bytes();
    const size_t wanted = bytes == 0 ? 1 : 2 * l2_bytes / bytes + 1;
    const int sets = static_cast<int>(std::min<size_t>(kMaxTimingSets, wanted));
    std::vector<Params> out{t.params};
    for (int set = 1; set < sets; ++set) {
        Params p = t.params;
        for (const auto* b : inputs) {
            copies->emplace_back(b->size());
            const DeviceBuffer<uint8_t>& copy = copies->back();
            CUDA_CHECK(cudaMemcpy(copy.get(), b->get(), b->bytes(), cudaMemcpyDeviceToDevice));
            // Q, K and V may point anywhere inside a buffer (packed QKV): keep the offset.
            const auto* from = reinterpret_cast<const char*>(b->get());
            const auto* to = reinterpret_cast<const char*>(copy.get());
            for (const void** ptr : {&p.q, &p.k, &p.v})
                if (contains(*b, *ptr)) *ptr = to + (static_cast<const char*>(*ptr) - from);
        }
        out.push_back(p);
    }
    return out;
}

void poison_output(const Problem& p, DeviceTensors& t, cudaStream_t stream) {
    if (p.out_dtype == DataType::kE4m3)  // its NaN byte, on every byte (check_output reads e4m3 O as bytes)
        poison(reinterpret_cast<uint8_t*>(t.o.get()), static_cast<int64_t>(t.o.bytes()), kPoisonBitsE4m3, stream);
    else
        poison(t.o.get(), static_cast<int64_t>(t.o.size()), kPoisonBits, stream);
    if (t.lse.size() > 0)
        poison(reinterpret_cast<uint32_t*>(t.lse.get()), static_cast<int64_t>(t.lse.size()), kPoisonLseBits, stream);
}

}  // namespace fmha
