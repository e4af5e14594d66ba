# HF transformers' greedy generation as the reference of `moewb generate`: the first N ids of the evaluation
# stream ([bos] + SentencePiece(text)), float32, eager attention, greedy, M new tokens (no early stop).
#   python3 hf_generate_reference.py MODEL_DIR TEXT OUT.json [--prompt-tokens 64] [--new-tokens 48]
import argparse, json, os

import sentencepiece as spm
import torch
from transformers import AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("model"), ap.add_argument("text"), ap.add_argument("out")
ap.add_argument("--prompt-tokens", type=int, default=64)
ap.add_argument("--new-tokens", type=int, default=48)
args = ap.parse_args()
sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "tokenizer.model"))
prompt = ([1] + sp.encode(open(args.text, encoding="utf-8").read()))[: args.prompt_tokens]
m = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="eager").cuda().eval()
with torch.no_grad():
    out = m.generate(torch.tensor([prompt]).cuda(), max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                     do_sample=False, eos_token_id=None, pad_token_id=0)
new = out[0, len(prompt):].tolist()
json.dump({"model": os.path.basename(args.model.rstrip("/")), "prompt_ids": prompt, "new_ids": new,
           "transformers": __import__("transformers").__version__, "dtype": "float32", "greedy": True},
          open(args.out, "w"), indent=1)
print("new ids:", new)
