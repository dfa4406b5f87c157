"""A tiny Llama-like model (random weights, no download) generating with fmha as its attention
backend. Run from the repository root after `make`:  python3 examples/transformers_generate.py"""

import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import fmha.hf  # noqa: E402

config = transformers.LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=128)
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=fmha.hf.register())
model = model.to(device="cuda", dtype=torch.bfloat16).eval()
prompt = torch.randint(0, config.vocab_size, (1, 16), device="cuda")
with torch.no_grad():
    tokens = model.generate(prompt, max_new_tokens=16, do_sample=False)
print("attention:", model.config._attn_implementation, "| generated:", tokens[0, 16:].tolist())
