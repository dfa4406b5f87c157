// src/layouts.h, host side: uniform_lengths, where fmha.exe gives the kernels no length
// arrays; and src/fmha/seq_lens.h on the host: each source of a sequence's offset and length
// (arrays, cu_seqlens, seqused_k, fixed steps, a paged cache).
#include "fmha/seq_lens.h"
#include "layouts.h"
#include "unit_test.h"

namespace {

// b sequences of s_q x s_kv, back to back.
fmha::SeqLens back_to_back(int b, int s_q, int s_kv) {
    fmha::SeqLens l;
    for (int i = 0; i < b; ++i) {
        l.q_lens.push_back(s_q);
        l.kv_lens.push_back(s_kv);
        l.q_offsets.push_back(i * s_q);
        l.kv_offsets.push_back(i * s_kv);
    }
    l.s_q_max = s_q;
    l.s_kv_max = s_kv;
    return l;
}

TEST(SeqLens, UniformOnlyWhereEverySequenceIsTheLongestBackToBack) {
    EXPECT_TRUE(fmha::uniform_lengths(back_to_back(3, 1, 4096)));
    EXPECT_TRUE(fmha::uniform_lengths(back_to_back(1, 16, 7)));
    fmha::SeqLens shorter = back_to_back(3, 1, 4096);
    shorter.kv_lens[1] = 4000;  // var-len keys, padded storage (offsets still i * s)
    EXPECT_FALSE(fmha::uniform_lengths(shorter));
    fmha::SeqLens packed = back_to_back(3, 2, 100);
    packed.q_lens[2] = 1;  // var-len queries
    EXPECT_FALSE(fmha::uniform_lengths(packed));
    fmha::SeqLens gap = back_to_back(3, 1, 100);
    gap.kv_offsets[2] = 256;  // storage with room between sequences
    EXPECT_FALSE(fmha::uniform_lengths(gap));
    fmha::SeqLens q_gap = back_to_back(3, 4, 100);
    q_gap.q_offsets[1] = 5;
    EXPECT_FALSE(fmha::uniform_lengths(q_gap));
    fmha::SeqLens short_array = back_to_back(3, 1, 100);
    short_array.kv_offsets.pop_back();  // arrays of different sizes: not read past their end
    EXPECT_FALSE(fmha::uniform_lengths(short_array));
}

}  // namespace

TEST(SeqLens, FromArraysCuSeqlensSequsedOrTheIndex) {
    fmha::Params p;
    p.s_q_max = 7;
    p.s_kv_max = 9;
    p.q_step = 10;  // fixed lengths in storage with room between sequences
    p.kv_step = 12;
    EXPECT_EQ(fmha::seq_q_offset(p, 3), 30);
    EXPECT_EQ(fmha::seq_q_len(p, 3), 7);
    EXPECT_EQ(fmha::seq_kv_offset(p, 3), 36);
    EXPECT_EQ(fmha::seq_kv_len(p, 3), 9);

    const int cu_q[] = {0, 5, 5, 12};  // var-len: prefix sums, an empty sequence included
    const int cu_k[] = {0, 9, 10, 30};
    p.q_offsets = cu_q;
    p.kv_offsets = cu_k;
    EXPECT_EQ(fmha::seq_q_offset(p, 2), 5);
    EXPECT_EQ(fmha::seq_q_len(p, 1), 0);
    EXPECT_EQ(fmha::seq_q_len(p, 2), 7);
    EXPECT_EQ(fmha::seq_kv_offset(p, 2), 10);
    EXPECT_EQ(fmha::seq_kv_len(p, 2), 20);

    const int used[] = {3, 1, 4};  // seqused_k: fewer keys than stored
    p.kv_lens = used;
    EXPECT_EQ(fmha::seq_kv_len(p, 2), 4);
    EXPECT_EQ(fmha::seq_kv_offset(p, 2), 10);

    const int q_lens[] = {1, 2, 3};  // fmha.exe's arrays: offsets and lengths both given
    const int q_off[] = {0, 16, 32};
    p.q_lens = q_lens;
    p.q_offsets = q_off;
    EXPECT_EQ(fmha::seq_q_offset(p, 2), 32);
    EXPECT_EQ(fmha::seq_q_len(p, 2), 3);

    int table = 0;  // a paged cache: tokens through the block table, no offset
    p.kv_block_table = &table;
    EXPECT_EQ(fmha::seq_kv_offset(p, 2), 0);
    EXPECT_EQ(fmha::seq_kv_len(p, 2), 4);
}
