# HF transformers and `moewb eval --device cuda` on the same GPU, model and text, side by side: the
# perplexity protocol of the engine's reference (ids = [bos] + SentencePiece(text), non-overlapping
# 256-token windows, every position but the first of a window scored), tokens/s at batch 8 and 64 windows
# per forward pass, HF in bf16 (and fp32 at batch 8), moewb in bf16 and fp32 modes.
# With --generate: greedy decode of 64 new tokens after a 64-token prompt instead, batch 1 and 16, HF bf16
# `generate` against `moewb generate` (decode tokens/s).
#   python3 hf_vs_moewb.py MODEL_DIR TEXT MOEWB [--max-windows N] [--generate] [--json OUT]
import argparse, json, math, os, subprocess, sys, time

import sentencepiece as spm
import torch
from transformers import AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("model"), ap.add_argument("text"), ap.add_argument("moewb")
ap.add_argument("--max-windows", type=int, default=0)
ap.add_argument("--generate", action="store_true")
ap.add_argument("--json")
args = ap.parse_args()
T = 256
sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "tokenizer.model"))
ids = [1] + sp.encode(open(args.text, encoding="utf-8").read())
n = len(ids) // T
if args.max_windows:
    n = min(n, args.max_windows)
x = torch.tensor(ids[: n * T]).view(n, T)
rows = []


def hf_eval(dtype, bs):
    m = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="eager").cuda().eval()
    with torch.no_grad():
        m(x[:bs].cuda())  # warm-up
        torch.cuda.synchronize()
        t0 = time.time()
        nll, cnt = 0.0, 0
        for i in range(0, n, bs):
            b = x[i : i + bs].cuda()
            lg = m(b).logits.float()
            lp = torch.log_softmax(lg[:, :-1], -1).gather(-1, b[:, 1:, None]).squeeze(-1)
            nll -= lp.double().sum().item()
            cnt += lp.numel()
        torch.cuda.synchronize()
        dt = time.time() - t0
    del m
    torch.cuda.empty_cache()
    return math.exp(nll / cnt), n * T / dt


def hf_generate(batch, new_tokens=64):
    m = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="eager").cuda().eval()
    prompt = torch.tensor([ids[:64]] * batch).cuda()
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        m.generate(prompt, max_new_tokens=8, min_new_tokens=8, **kw)  # warm-up
        torch.cuda.synchronize()
        t0 = time.time()
        m.generate(prompt, max_new_tokens=1, min_new_tokens=1, **kw)
        torch.cuda.synchronize()
        prefill = time.time() - t0
        t0 = time.time()
        m.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        torch.cuda.synchronize()
        total = time.time() - t0
    del m
    torch.cuda.empty_cache()
    # decode rate: the new tokens after the first, over the time after the prefill
    return batch * (new_tokens - 1) / max(total - prefill, 1e-9)


if args.generate:
    ids_arg = ",".join(str(i) for i in ids[:64])
    for batch in (1, 16):
        rate = hf_generate(batch)
        rows.append({"engine": "hf", "precision": "bf16", "batch": batch, "decode_tokens_per_second": rate})
        print(f"hf     bf16 generate batch {batch:3d}: decode {rate:10.0f} tok/s", flush=True)
        for precision in ("bf16",):
            cmd = [args.moewb, "generate", args.model, "--ids", ids_arg, "--max-new-tokens", "64", "--ignore-eos",
                   "--batch", str(batch), "--device", "cuda", "--gpu-precision", precision, "--json"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print("moewb failed:", p.stderr[-2000:], flush=True)
                continue
            j = json.loads(p.stdout)
            rows.append({"engine": "moewb", "precision": precision, "batch": batch,
                         "decode_tokens_per_second": j["decode_tokens_per_second"]})
            print(f"moewb  {precision} generate batch {batch:3d}: decode {j['decode_tokens_per_second']:10.0f} tok/s",
                  flush=True)
    if args.json:
        json.dump({"model": os.path.basename(args.model.rstrip("/")), "rows": rows}, open(args.json, "w"), indent=1)
    sys.exit(0)

for dtype, name, batches in ((torch.bfloat16, "bf16", (8, 64)), (torch.float32, "fp32", (8,))):
    for bs in batches:
        ppl, tps = hf_eval(dtype, bs)
        rows.append({"engine": "hf", "precision": name, "batch": bs, "ppl": ppl, "tokens_per_second": tps})
        print(f"hf     {name} batch {bs:3d}: ppl {ppl:.6f}  {tps:12.0f} tok/s", flush=True)

for precision in ("bf16", "fp32"):
    for bs in (8, 64):
        cmd = [args.moewb, "eval", args.model, "--text", args.text, "--seq-len", str(T), "--device", "cuda",
               "--gpu-precision", precision, "--batch-tokens", str(bs * T), "--json"]
        if args.max_windows:
            cmd += ["--max-windows", str(args.max_windows)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print("moewb failed:", p.stderr[-2000:], flush=True)
            continue
        j = json.loads(p.stdout)
        rows.append({"engine": "moewb", "precision": precision, "batch": bs, "ppl": j["ppl"],
                     "tokens_per_second": j["tokens_per_second"], "device": j.get("device")})
        print(f"moewb  {precision} batch {bs:3d}: ppl {j['ppl']:.6f}  {j['tokens_per_second']:12.0f} tok/s "
              f"({j.get('device')})", flush=True)
if args.json:
    json.dump({"model": os.path.basename(args.model.rstrip("/")), "windows": n, "rows": rows}, open(args.json, "w"),
              indent=1)
