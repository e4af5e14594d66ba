# A Mixtral-8x7B-shaped model with 2 layers (random bf16 weights, seed 0) and tiny-mixtral's tokenizer: the
# engine's throughput at the scale users work at (docs/benchmarks.md). Needs a GPU with ~12 GB free.
#   python3 make_big_model.py OUT_DIR TOKENIZER_DIR
import os, shutil, sys

import torch
from transformers import MixtralConfig, MixtralForCausalLM

out, tokenizer_dir = sys.argv[1], sys.argv[2]
cfg = MixtralConfig(vocab_size=4096, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                    num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                    max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                    eos_token_id=2)
torch.manual_seed(0)
with torch.device("cuda"):
    model = MixtralForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.model", "tokenizer_config.json"):
    shutil.copy(os.path.join(tokenizer_dir, f), out)
print(f"{out}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters")
