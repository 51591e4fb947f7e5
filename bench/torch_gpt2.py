#!/usr/bin/env python3
"""PyTorch's GPT-2 training step beside `octet bench model`, for tools/gpu-check's model phase.

The model is the one modules/gpt.cpp builds with GPT-2's architecture: token and learned position
embeddings, pre-norm blocks x + proj(attn(qkv(LayerNorm(x)))) then h + fc2(gelu_tanh(fc1(
LayerNorm(h)))) with fc1 4 x d wide, biases on every Linear and norm, a final LayerNorm and an LM
head tied to the token embedding (no bias); random init (N(0, 0.02) weights, zero biases), no
dropout. A step is the mean cross-entropy loss, backward and AdamW (lr 1e-4, betas 0.9/0.95,
eps 1e-8, no weight decay: modules::OptimizerOptions), under bf16 autocast with f32 parameters,
causal attention through scaled_dot_product_attention, AdamW fused, the model torch.compile'd
(or with --compile-scope blocks each block alone); whatever this torch lacks, or a compiler that
fails, falls back (the JSON says which). Batches are cut llm.c-style from an
llm.c token shard (--data) or random ids: batch w is tokens [w B T, (w + 1) B T) and its targets
the same shifted by one, at most 4 batches taken in turn, put on the device before the timing.

FLOPs a token, as octet's bench counts them: 6 x the parameters but the position embedding (the
tied embedding counts once, as the LM head) + 12 x layers x d x seq (attention counted dense).
MFU is the FLOPs rate over --peak-tflops. Warm-up steps (torch.compile compiles in the first),
then --steps timed steps, each ended by a device synchronize; the median step gives tokens/s.
Prints one JSON line.

  --write-shard PATH   writes a shard of random ids below --vocab and exits; needs no torch.

When torch is missing it says how to install it and exits 0.
"""
import argparse
import array
import json
import random
import struct
import sys
import time

SHARD_MAGIC = 20240520  # llm.c's token shard: 256 little-endian int32 (magic, version, count)
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256
MAX_BATCHES = 4


def write_shard(path, count, vocab, seed):
    rng = random.Random(seed)
    tokens = array.array("H", (rng.randrange(vocab) for _ in range(count)))
    if sys.byteorder == "big":
        tokens.byteswap()
    header = [SHARD_MAGIC, SHARD_VERSION, count] + [0] * (SHARD_HEADER_INTS - 3)
    with open(path, "wb") as f:
        f.write(struct.pack("<%di" % SHARD_HEADER_INTS, *header))
        f.write(tokens.tobytes())


def read_shard(path, wanted, vocab):
    """The first `wanted` tokens of an llm.c shard (fewer when it has fewer), checked."""
    with open(path, "rb") as f:
        header = struct.unpack("<%di" % SHARD_HEADER_INTS, f.read(4 * SHARD_HEADER_INTS))
        magic, version, count = header[:3]
        if magic != SHARD_MAGIC or version != SHARD_VERSION:
            sys.exit("%s: not an llm.c token shard (magic %d, version %d; want %d, %d)"
                     % (path, magic, version, SHARD_MAGIC, SHARD_VERSION))
        n = min(count, wanted)
        tokens = array.array("H")
        tokens.frombytes(f.read(2 * n))
    if len(tokens) != n:
        sys.exit("%s: truncated: its header says %d tokens" % (path, count))
    if sys.byteorder == "big":
        tokens.byteswap()
    if n and max(tokens) >= vocab:
        sys.exit("%s: token %d is not below the vocabulary %d (--vocab)"
                 % (path, max(tokens), vocab))
    return tokens.tolist()


def median(values):
    v, n = sorted(values), len(values)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--seq", "--context", dest="seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps (compile included)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--data", help="an llm.c token shard (default: random ids)")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when there is one)")
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="MFU's denominator (default 989: dense bf16, Hopper SXM parts)")
    parser.add_argument("--autocast", choices=("bf16", "none"), default="bf16")
    parser.add_argument("--no-compile", action="store_true", help="run the model eagerly")
    parser.add_argument("--compile-mode", help="torch.compile's mode (default: its default)")
    parser.add_argument("--compile-scope", choices=("model", "blocks"), default="model",
                        help="compile the whole model (default), or each block alone (less "
                        "compile time: identical blocks share their code from torch 2.5 on)")
    parser.add_argument("--no-fused-adamw", action="store_true")
    parser.add_argument("--threads", type=int, help="CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--write-shard", metavar="PATH",
                        help="write a shard of random ids below --vocab and exit")
    parser.add_argument("--shard-tokens", type=int, default=MAX_BATCHES * 8 * 1024 + 1,
                        help="--write-shard's token count")
    args = parser.parse_args()
    for name in ("layers", "d_model", "heads", "vocab", "seq", "batch", "steps", "shard_tokens"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1" % name.replace("_", "-"))
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    if args.d_model % args.heads:
        parser.error("--d-model %d is not a multiple of --heads %d" % (args.d_model, args.heads))
    if args.vocab > 65536:
        parser.error("--vocab %d: shard tokens are uint16" % args.vocab)
    return args


def build_model(torch, args, sdpa):
    nn, F = torch.nn, torch.nn.functional
    d, heads, seq = args.d_model, args.heads, args.seq
    head_dim = d // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d, eps=1e-5)
            self.qkv = nn.Linear(d, 3 * d)  # packed as (3, H, D), like octet's
            self.proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d, eps=1e-5)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)
            if not sdpa:
                mask = torch.ones(seq, seq, dtype=torch.bool).tril()
                self.register_buffer("mask", mask, persistent=False)

        def attention(self, x):
            B, T, C = x.shape
            qkv = self.qkv(self.ln_1(x)).view(B, T, 3, heads, head_dim)
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # (B, H, T, D)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (head_dim ** -0.5)  # (B, H, T, T)
                att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
                y = att @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

        def forward(self, x):
            h = x + self.attention(x)
            return h + self.fc2(F.gelu(self.fc1(self.ln_2(h)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(args.vocab, d)
            self.wpe = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(d, eps=1e-5)
            self.lm_head = nn.Linear(d, args.vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
            self.register_buffer("pos", torch.arange(seq), persistent=False)

        def forward(self, ids, targets):  # (B, T) each -> the mean loss
            T = ids.size(1)
            x = self.wte(ids) + self.wpe(self.pos[:T])  # (B, T, C)
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))  # (B, T, V)
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(),
                                   targets.reshape(-1))

    return GPT2()


def make_optimizer(torch, model, want_fused):
    """AdamW, fused where this torch has it for these parameters; (optimizer, fused, note)."""
    options = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    note = "not asked (--no-fused-adamw)"
    if want_fused:
        try:
            return torch.optim.AdamW(model.parameters(), fused=True, **options), True, None
        except (TypeError, RuntimeError, ValueError) as e:  # no `fused`, or not for this device
            note = "fused=True refused: %s" % str(e).splitlines()[0][:200]
    return torch.optim.AdamW(model.parameters(), **options), False, note


def main():
    args = parse_args()
    if args.write_shard:
        write_shard(args.write_shard, args.shard_tokens, args.vocab, args.seed)
        return 0

    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch not installed: pip install torch (a GPU machine), or on Debian "
              "apt-get install python3-torch (CPU only)")
        return 0

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    sdpa = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0

    B, T = args.batch, args.seq
    rows = B * T
    if args.data:
        tokens = read_shard(args.data, MAX_BATCHES * rows + 1, args.vocab)
        if len(tokens) < rows + 1:
            sys.exit("%s has %d tokens; a batch of %d tokens and its targets need %d"
                     % (args.data, len(tokens), rows, rows + 1))
        tokens = torch.tensor(tokens, dtype=torch.long)
    else:
        tokens = torch.randint(args.vocab, (MAX_BATCHES * rows + 1,))
    batches = [(tokens[w * rows:(w + 1) * rows].view(B, T).to(device),
                tokens[w * rows + 1:(w + 1) * rows + 1].view(B, T).to(device))
               for w in range((tokens.numel() - 1) // rows)]

    model = build_model(torch, args, sdpa).to(device)
    params = sum(p.numel() for p in model.parameters())  # the tied weight once
    flops_per_token = 6 * (params - model.wpe.weight.numel()) + 12 * args.layers * args.d_model * T
    optimizer, fused, fused_note = make_optimizer(torch, model, not args.no_fused_adamw)

    compiled, compile_note = False, None
    run, blocks = model, list(model.blocks)
    if args.no_compile:
        compile_note = "not asked (--no-compile)"
    elif not hasattr(torch, "compile"):
        compile_note = "this torch has no torch.compile"
    else:
        kwargs = {"mode": args.compile_mode} if args.compile_mode else {}
        if args.compile_scope == "model":
            run = torch.compile(model, **kwargs)
        else:  # the embeddings, final norm, head and loss run eagerly
            for i, block in enumerate(blocks):
                model.blocks[i] = torch.compile(block, **kwargs)
        compiled = True

    def run_eagerly():
        nonlocal run
        run = model
        for i, block in enumerate(blocks):
            model.blocks[i] = block

    def autocast():
        if args.autocast == "none":
            return torch.autocast(device.type, enabled=False)
        return torch.autocast(device.type, dtype=torch.bfloat16)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    step_count = 0

    def step():  # the batches in turn
        nonlocal step_count
        ids, targets = batches[step_count % len(batches)]
        step_count += 1
        with autocast():
            loss = run(ids, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for i in range(max(args.warmup, 1 if compiled else 0)):
        try:
            loss = step()
        except Exception as e:  # noqa: BLE001 - a compiler failure: report it, measure eager
            if not compiled or i > 0:
                raise
            print("torch.compile failed, running eagerly: %s" % e, file=sys.stderr)
            compile_note = "failed, ran eagerly: %s" % str(e).splitlines()[0][:200]
            run_eagerly()
            compiled = False
            optimizer.zero_grad(set_to_none=True)
            loss = step()
    sync()
    warmup_s = time.perf_counter() - t0

    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = median(times)
    tokens_per_s = rows / (ms * 1e-3)
    result = {
        "bench": "torch.gpt2_train_step",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "compiled": compiled,
        "compile_scope": args.compile_scope if compiled else None,
        "compile_note": compile_note,
        "fused_adamw": fused,
        "fused_adamw_note": fused_note,
        "sdpa": sdpa,
        "autocast": args.autocast,
        "shape": {"layers": args.layers, "d_model": args.d_model, "heads": args.heads,
                  "vocab": args.vocab, "seq": T, "batch": B, "params": params,
                  "flops_per_token": flops_per_token},
        "data": args.data or "random",
        "warmup": args.warmup,
        "warmup_s": round(warmup_s, 3),
        "steps": args.steps,
        "step_ms_median": ms,
        "step_ms_min": min(times),
        "tokens_per_s": tokens_per_s,
        "mfu": flops_per_token * tokens_per_s / (args.peak_tflops * 1e12),
        "peak_tflops": args.peak_tflops,
        "loss_last": float(loss),
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
