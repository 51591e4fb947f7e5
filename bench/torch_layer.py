#!/usr/bin/env python3
"""PyTorch's version of the `octet bench layer` f32 step, for bench/peer_bench.sh.

The same pre-norm block as modules/transformer.cpp at the bench's shape (d 768, 12 heads,
ffn 3072, seq 256, batch 4, f32): x + proj(attn(qkv(LayerNorm(x)))), then
h + fc2(gelu_tanh(fc1(LayerNorm(h)))), biases everywhere, no dropout; the input takes a
gradient; backward from a fixed random output gradient; AdamW (lr 1e-4, betas 0.9/0.95,
eps 1e-8, no weight decay, as modules::OptimizerOptions). Warm-up runs, then the median of the
timed runs. Prints one JSON line.

Runs on Debian's python3-torch; when it is missing it says how to install it and exits 0.
"""
import argparse
import ctypes
import json
import math
import sys
import time


def openblas_core():
    """The core type the process's OpenBLAS chose (torch reaches BLAS through libblas.so.3)."""
    for name in ("libblas.so.3", "libopenblas.so.0"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()

    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("python3-torch not installed: sudo apt-get install python3-torch")
        return 0

    torch.set_num_threads(args.threads)
    torch.manual_seed(3)
    d, heads, seq, batch = args.d_model, args.heads, args.seq, args.batch
    ffn = 4 * d
    head_dim = d // heads
    sdpa = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(d, eps=1e-5)
            self.qkv = torch.nn.Linear(d, 3 * d)  # packed as (3, H, D), like octet's
            self.proj = torch.nn.Linear(d, d)
            self.ln2 = torch.nn.LayerNorm(d, eps=1e-5)
            self.fc1 = torch.nn.Linear(d, ffn)
            self.fc2 = torch.nn.Linear(ffn, d)
            for lin in (self.qkv, self.proj, self.fc1, self.fc2):
                torch.nn.init.normal_(lin.weight, std=0.02)
                torch.nn.init.zeros_(lin.bias)
            mask = torch.ones(seq, seq, dtype=torch.bool).tril()
            self.register_buffer("mask", mask, persistent=False)

        def attention(self, x):
            B, T, C = x.shape
            qkv = self.qkv(self.ln1(x)).view(B, T, 3, heads, head_dim)
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # (B, H, T, D)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))  # (B, H, T, T)
                att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
                y = att @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

        def forward(self, x):
            h = x + self.attention(x)
            return h + self.fc2(F.gelu(self.fc1(self.ln2(h)), approximate="tanh"))

    block = Block()
    optimizer = torch.optim.AdamW(block.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.0)
    x = torch.randn(batch, seq, d, requires_grad=True)
    grad = torch.randn(batch, seq, d)

    def step():
        y = block(x)
        y.backward(grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        x.grad = None

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    result = {
        "bench": "torch.transformer_train_step",
        "median_ms": times[len(times) // 2],
        "times_ms": times,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "attention": "scaled_dot_product_attention" if sdpa else "matmul + masked softmax",
        "openblas_core": openblas_core(),
        "shape": {"d_model": d, "heads": heads, "ffn": ffn, "seq": seq, "batch": batch},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
