// src/layouts.h, host side: uniform_lengths, which sets Params::uniform_lengths (kernels may
// then take each sequence's lengths and offsets from its index instead of reading them).
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
