#!/usr/bin/env python3
"""Loads a Hugging Face folder that `octet export` wrote with transformers and checks it against
octet: the logits on reference.json's ids (from tests/support/hf_reference.py) within f32 rounding
of its float64 reference, and greedy ids equal to those `octet generate --prompt-ids` printed.

    hf_transformers_check.py EXPORTED_DIR REFERENCE_JSON PROMPT_IDS OCTET_IDS
Prints one line; exits 1 when either check fails. Runs on the CPU (tools/gpu-check calls it on
the GPU machine, which has PyTorch and transformers).
"""
import json
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def main():
    folder, reference, prompt, octet_ids = sys.argv[1:5]
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    ref = json.load(open(reference))
    with torch.no_grad():
        logits = model(torch.tensor(ref["ids"])).logits.double().numpy()
    want = np.array(ref["logits"]).reshape(ref["shape"])
    err, scale = float(np.abs(logits - want).max()), float(np.abs(want).max())
    # f32 sums through two small layers: 1e-4 of the largest logit is far above their rounding
    # and far below a wrong layout (a transposed weight, a swapped half).
    logits_ok = err <= 1e-4 * scale
    ids = torch.tensor([[int(x) for x in prompt.split(",")]])
    want_ids = [int(x) for x in octet_ids.split(",")]
    got = []
    with torch.no_grad():  # greedy, one token a step, no generation config involved
        for _ in want_ids:
            token = int(model(ids).logits[0, -1].argmax())
            got.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    ids_ok = got == want_ids
    print(f"{folder}: {type(model).__name__}, logits max |diff| {err:.3g} of {scale:.3g} "
          f"({'ok' if logits_ok else 'TOO FAR'}); greedy ids "
          f"{'equal to octet' if ids_ok else f'differ: {got} vs octet {want_ids}'}")
    sys.exit(0 if logits_ok and ids_ok else 1)


if __name__ == "__main__":
    main()
