"""fmha as a Hugging Face transformers attention backend: tiny Llama-like (GQA, causal) and
Gemma-2-like (softcapping, sliding window) models built from configs with random weights (no
download). The logits of a forward and the scores of a generate() with a KV cache must match
the sdpa backend's within bf16 tolerance. Needs torch, transformers, a GPU and lib/libfmha.so."""

import pytest

from .package import load_package

torch, _ = load_package()
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
import fmha.hf  # noqa: E402

pytestmark = pytest.mark.gpu


def llama():
    return transformers.LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                                     max_position_embeddings=512)


def gemma2():
    return transformers.Gemma2Config(vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                                     sliding_window=16, attn_logit_softcapping=50.0, query_pre_attn_scalar=128,
                                     max_position_embeddings=512)


def build(config, implementation):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=implementation)
    return model.to(device="cuda", dtype=torch.bfloat16).eval()


@pytest.mark.parametrize("make_config", [llama, gemma2], ids=["llama", "gemma2"])
def test_forward_and_generate_match_sdpa(make_config):
    name = fmha.hf.register()
    ours, sdpa = build(make_config(), name), build(make_config(), "sdpa")
    ids = torch.randint(0, 512, (2, 40), device="cuda")
    with torch.no_grad():
        want = sdpa(ids).logits.float()
        got = ours(ids).logits.float()
        assert (got - want).abs().max().item() < 0.05 * want.abs().max().item()
        # Decode with the model's KV cache (s_q = 1 against a growing cache), then the same
        # sequence through sdpa in one forward: the step scores must be its logits.
        gen = ours.generate(ids, max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True)
        full = sdpa(gen.sequences).logits.float()
        for step, score in enumerate(gen.scores):
            ref = full[:, ids.shape[1] - 1 + step]
            assert (score.float() - ref).abs().max().item() < 0.05 * ref.abs().max().item(), f"step {step}"
