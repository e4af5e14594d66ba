#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reference logits from Hugging Face transformers for the zoo checkpoints (run where torch and
transformers are installed; the engine's tests compare against what this writes).

Each case is a zoo model, optionally with config overrides that exercise code paths the stock tiny
configs do not reach (short sliding windows and attention chunks, Granite's multipliers, NoPE layers).
The tests apply the same overrides (tests/data/hf-zoo-references/<case>/case.json) before running the
engine, so both sides see identical models.

usage: make_zoo_references.py ZOO_DIR OUT_DIR [CASE ...]   (all cases when none is named)
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file

PROMPT_TOKENS = 48

CASES = {
    "mixtral": {},
    "qwen3_moe": {},
    "olmoe": {},
    "deepseek_v2": {},
    # The zoo's qwen2_moe declares 16 KV heads for 4 query heads, which neither HF nor the engine can run;
    # keep the first 4 KV heads (k/v projection rows and biases), as the engine's invariant tests do.
    "qwen2_moe": {"keep_kv_heads": 4},
    "granitemoe": {},
    "granitemoe-multipliers": {"model": "granitemoe",
                               "config": {"embedding_multiplier": 12.0, "attention_multiplier": 0.05,
                                          "residual_multiplier": 0.22, "logits_scaling": 8.0}},
    "gpt_oss": {},
    "gpt_oss-window8": {"model": "gpt_oss", "config": {"sliding_window": 8}},
    "llama4_text": {},
    "llama4_text-chunk8-nope": {"model": "llama4_text",
                                "config": {"attention_chunk_size": 8, "no_rope_layers": [1, 0],
                                           "floor_scale": 4}},
    # The zoo's gpt_oss has zero biases and activations far below the SwiGLU clamp: random biases and
    # gate/up weights x40 reach both. The tensors are saved with the case (model.safetensors).
    "gpt_oss-biases-clamp": {"model": "gpt_oss", "weights": "gpt_oss_biases_clamp"},
    # Llama 4 with layer 1 dense (intermediate_size_mlp, new random MLP weights) and top-2 routing.
    "llama4_text-dense-top2": {"model": "llama4_text", "weights": "llama4_dense_top2",
                               "config": {"moe_layers": [0], "num_experts_per_tok": 2}},
}


def perturbed_weights(kind, tensors, config):
    """Deterministic changes to the zoo tensors for the cases named in CASES["..."]["weights"]."""
    g = torch.Generator().manual_seed(20261122)
    out = dict(tensors)
    if kind == "gpt_oss_biases_clamp":
        for name, t in tensors.items():
            if name.endswith("bias") or name.endswith("_bias"):
                out[name] = (0.3 * torch.randn(t.shape, generator=g)).to(t.dtype)
            if name.endswith("gate_up_proj"):
                out[name] = (t.float() * 40.0).to(t.dtype)
    elif kind == "llama4_dense_top2":
        prefix = "model.layers.1.feed_forward."
        for name in [n for n in out if n.startswith(prefix)]:
            del out[name]
        hidden, inter = config["hidden_size"], config["intermediate_size_mlp"]
        dtype = next(iter(tensors.values())).dtype
        for proj, shape in (("gate_proj", (inter, hidden)), ("up_proj", (inter, hidden)),
                            ("down_proj", (hidden, inter))):
            out[prefix + proj + ".weight"] = (0.05 * torch.randn(shape, generator=g)).to(dtype)
    else:
        raise ValueError(kind)
    return {k: v.contiguous() for k, v in out.items()}


def prompt_ids(vocab):
    # A fixed pseudo-random prompt (LCG) that avoids id 0..2 (special tokens in several families).
    ids, state = [], 12345
    for _ in range(PROMPT_TOKENS):
        state = (state * 1103515245 + 12345) % (1 << 31)
        ids.append(3 + state % (vocab - 3))
    return ids


def prepared_model_dir(zoo, case, spec, tmp):
    src = os.path.join(zoo, spec.get("model", case))
    dst = os.path.join(tmp, case)
    os.makedirs(dst)
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config.update(spec.get("config", {}))
    tensors = load_file(os.path.join(src, "model.safetensors"))
    keep = spec.get("keep_kv_heads")
    if keep:
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        rows = keep * head_dim
        for name in list(tensors):
            if any(p in name for p in ("k_proj.", "v_proj.")):
                tensors[name] = tensors[name][:rows].contiguous()
        config["num_key_value_heads"] = keep
    if spec.get("weights"):
        tensors = perturbed_weights(spec["weights"], tensors, config)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst, config


def main():
    zoo, out = sys.argv[1], sys.argv[2]
    wanted = sys.argv[3:] or list(CASES)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        for case, spec in CASES.items():
            if case not in wanted:
                continue
            model_dir, config = prepared_model_dir(zoo, case, spec, tmp)
            model, info = transformers.AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
            # A key HF would initialise at random would make the reference meaningless.
            missing = [k for k in info.get("missing_keys", []) if "rotary" not in k]
            if missing or info.get("unexpected_keys"):
                raise RuntimeError(f"{case}: missing {missing}, unexpected {info.get('unexpected_keys')}")
            model.eval()
            ids = prompt_ids(config["vocab_size"])
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float().numpy()
            case_dir = os.path.join(out, case)
            os.makedirs(case_dir, exist_ok=True)
            np.save(os.path.join(case_dir, "ids.npy"), np.array(ids, dtype=np.int32))
            np.save(os.path.join(case_dir, "logits_fp32.npy"), logits.astype(np.float32))
            if spec.get("weights"):  # the engine test runs these tensors, not the zoo's
                shutil.copy(os.path.join(model_dir, "model.safetensors"), os.path.join(case_dir, "model.safetensors"))
            with open(os.path.join(case_dir, "case.json"), "w") as f:
                json.dump({"model": spec.get("model", case), "config_overrides": spec.get("config", {}),
                           "own_weights": bool(spec.get("weights")),
                           "keep_kv_heads": spec.get("keep_kv_heads"),
                           "transformers": transformers.__version__, "torch": torch.__version__,
                           "max_abs_logit": float(np.abs(logits).max())}, f, indent=2)
            print(f"{case}: {type(model).__name__} logits {logits.shape} max|.| {np.abs(logits).max():.4f}")


if __name__ == "__main__":
    main()
