"""Hugging Face transformers' attention interface over fmha: `fmha.hf.register()` adds
attn_implementation="fmha" for models that route attention through AttentionInterface
(Llama, Gemma 2, Qwen, Mistral, ...): causal, GQA, sliding windows and softcapping, with the
models' own KV cache (prefill and decode), and attention dropout while the module trains."""

from __future__ import annotations

from .interface import flash_attn_func

NAME = "fmha"


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                      softcap=None, **kwargs):
    """transformers' attention function: query [b, h, s_q, d], key and value [b, h_kv, s_k, d];
    returns ([b, s_q, h, dv], None). `dropout` applies only while module.training, as
    transformers' eager attention does (the models pass 0.0 in eval anyway)."""
    dropout_p = float(dropout or 0.0) if getattr(module, "training", False) else 0.0
    if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all()):
        raise NotImplementedError("fmha: padded batches (a 2-D attention mask with zeros)")
    causal = bool(getattr(module, "is_causal", True))
    window = (int(sliding_window) - 1, 0 if causal else int(sliding_window) - 1) if sliding_window else (-1, -1)
    out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), softmax_scale=scaling,
                          causal=causal, window_size=window, softcap=float(softcap or 0.0), dropout_p=dropout_p)
    return out, None


def register(name: str = NAME) -> str:
    """Registers the attention function (and, where transformers has one, the flash-style mask
    function, which passes None unless a batch is padded). Returns the name to pass as
    attn_implementation."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, attention_forward)
    try:
        from transformers import AttentionMaskInterface
        from transformers.masking_utils import flash_attention_mask
    except ImportError:
        pass
    else:
        AttentionMaskInterface.register(name, flash_attention_mask)
    return name
