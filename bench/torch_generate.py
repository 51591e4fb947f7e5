#!/usr/bin/env python3
"""A PyTorch GPT-2 (124M shape, random weights, f32) generating with a key/value cache, timed as
`octet bench generate` times octet: milliseconds per token at positions 128 and 1024, the wall
time of the tokens after the prompt's pass over their count.
Written for this comparison (pre-norm blocks, tanh GELU, tied head, learned positions); the
attention of a new token is a softmax over its scores against the cached keys (Debian's PyTorch
1.13 has no scaled_dot_product_attention).

    bench/torch_generate.py [threads] [reps] [steps]
Prints one JSON object per position: {"bench": "generate.kv_pos128", "median_ms": ...}.
"""
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

VOCAB, CTX, LAYERS, D, HEADS = 50304, 1024, 12, 768, 12


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)
        self.ln2 = torch.nn.LayerNorm(D)
        self.fc = torch.nn.Linear(D, 4 * D)
        self.out = torch.nn.Linear(4 * D, D)

    def forward(self, x, cache, pos):
        # x (B, T, D); cache: [k, v] each (B, HEADS, CTX, D / HEADS), filled up to pos.
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        shape = (b, t, HEADS, D // HEADS)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        cache[0][:, :, pos:pos + t] = k
        cache[1][:, :, pos:pos + t] = v
        keys, values = cache[0][:, :, :pos + t], cache[1][:, :, :pos + t]
        scores = (q @ keys.transpose(-2, -1)) / math.sqrt(D // HEADS)  # (B, H, t, pos + t)
        if t > 1:  # the prompt: causal within it
            mask = torch.ones(t, pos + t, dtype=torch.bool).tril(diagonal=pos)
            scores = scores.masked_fill(~mask, float("-inf"))
        y = scores.softmax(-1) @ values
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, D)
        self.wpe = torch.nn.Embedding(CTX, D)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = torch.nn.LayerNorm(D)

    def forward(self, ids, caches, pos):
        x = self.wte(ids) + self.wpe(torch.arange(pos, pos + ids.shape[1]))
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache, pos)
        return self.ln_f(x[:, -1]) @ self.wte.weight.t()  # the last position's logits

    @torch.inference_mode()
    def generate(self, prompt, new_tokens):
        b = prompt.shape[0]
        caches = [[torch.zeros(b, HEADS, CTX, D // HEADS) for _ in range(2)] for _ in self.blocks]
        token = self(prompt, caches, 0).argmax(-1, keepdim=True)
        pos = prompt.shape[1]
        start = time.perf_counter()
        for _ in range(new_tokens - 1):
            token = self(token, caches, pos).argmax(-1, keepdim=True)
            pos += 1
        return time.perf_counter() - start  # the tokens after the prompt's


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    torch.set_num_threads(threads)
    torch.manual_seed(5)
    model = GPT().eval()
    for pos in (128, CTX):
        prompt = (torch.arange(pos - steps) * 7919 % VOCAB).unsqueeze(0)
        model.generate(prompt, 2)  # warm-up
        per_token = [model.generate(prompt, 1 + steps) * 1e3 / steps for _ in range(reps)]
        print(json.dumps({"bench": f"generate.kv_pos{pos}", "median_ms": statistics.median(per_token),
                          "torch": torch.__version__, "threads": threads}))


if __name__ == "__main__":
    main()
