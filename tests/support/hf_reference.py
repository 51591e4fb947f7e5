#!/usr/bin/python3
"""Random-weight GPT-2 folders in Hugging Face's layout, with reference logits, for octet's tests.

usage: hf_reference.py OUT_DIR

Writes, under OUT_DIR:
  gpt2_f32/          F32, names without a prefix, the attention-mask buffers real files carry
  gpt2_bf16/         BF16, "transformer." names, a tied lm_head.weight equal to wte
  gpt2_f16_sharded/  F16, "transformer." names, three shards and model.safetensors.index.json
  gpt2_n_inner/      F32, an MLP of width n_inner = 48 instead of 4 * n_embd
  bad_*/             folders octet must refuse, one fault each (see BAD below)
Each good folder also holds reference.json: token ids (B, T), the logits (B, T, vocab) of GPT-2's
forward in float64 on the weights as stored (bf16 and f16 values decoded exactly), and per logit
the sum over the LM head's dot product of |h_c * wte[v, c]|, the scale of its f32 rounding error.

The forward is GPT2LMHeadModel's, written from the architecture: token + position embeddings;
per layer x += c_proj(attn(ln_1(x))), x += mlp(ln_2(x)) with Conv1D layers (y = x @ W + b,
W stored (in, out)), c_attn's output split as (q, k, v) each (heads, head size), causal softmax
attention scaled by 1/sqrt(head size), GELU in its tanh form (gelu_new); ln_f; logits = x @ wte^T.
Needs only numpy (Debian: python3-numpy).
"""

import json
import os
import struct
import sys

import numpy as np

VOCAB, POSITIONS, EMBD, HEADS, LAYERS = 50, 16, 32, 4, 2
EPS = 1e-5
BATCH, TOKENS = 2, 11
INNER = 48  # gpt2_n_inner's MLP width


# ---- safetensors ----

def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (no NaNs here)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode(values, dtype):
    """(bytes, the values as stored, as float64) of a float array in a safetensors dtype."""
    if dtype == "F32":
        a = values.astype(np.float32)
        return a.tobytes(), a.astype(np.float64)
    if dtype == "F16":
        a = values.astype(np.float16)
        return a.tobytes(), a.astype(np.float64)
    if dtype == "BF16":
        bits = bf16_bits(values.astype(np.float32))
        return bits.tobytes(), bf16_value(bits).astype(np.float64)
    if dtype == "I32":
        a = np.round(values * 100).astype(np.int32)
        return a.tobytes(), a.astype(np.float64)
    if dtype == "F64":
        a = values.astype(np.float64)
        return a.tobytes(), a
    raise ValueError(dtype)


def write_safetensors(path, entries, metadata=None):
    """entries: list of (name, dtype, shape, bytes)."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in entries:
            f.write(data)


# ---- the model ----

def random_weights(rng, layers=LAYERS, embd=EMBD, inner=None):
    """GPT-2's parameters by Hugging Face name (no prefix), Conv1D weights (in, out)."""
    inner = inner or 4 * embd
    w = {"wte.weight": rng.normal(0, 0.3, (VOCAB, embd)),
         "wpe.weight": rng.normal(0, 0.1, (POSITIONS, embd))}
    for i in range(layers):
        h = f"h.{i}."
        w[h + "ln_1.weight"] = 1 + rng.normal(0, 0.1, embd)
        w[h + "ln_1.bias"] = rng.normal(0, 0.1, embd)
        w[h + "attn.c_attn.weight"] = rng.normal(0, 0.2, (embd, 3 * embd))
        w[h + "attn.c_attn.bias"] = rng.normal(0, 0.1, 3 * embd)
        w[h + "attn.c_proj.weight"] = rng.normal(0, 0.2, (embd, embd))
        w[h + "attn.c_proj.bias"] = rng.normal(0, 0.1, embd)
        w[h + "ln_2.weight"] = 1 + rng.normal(0, 0.1, embd)
        w[h + "ln_2.bias"] = rng.normal(0, 0.1, embd)
        w[h + "mlp.c_fc.weight"] = rng.normal(0, 0.2, (embd, inner))
        w[h + "mlp.c_fc.bias"] = rng.normal(0, 0.1, inner)
        w[h + "mlp.c_proj.weight"] = rng.normal(0, 0.1, (inner, embd))
        w[h + "mlp.c_proj.bias"] = rng.normal(0, 0.1, embd)
    w["ln_f.weight"] = 1 + rng.normal(0, 0.1, embd)
    w["ln_f.bias"] = rng.normal(0, 0.1, embd)
    return w


def layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * g + b


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gpt2_forward(w, ids, layers=LAYERS, heads=HEADS):
    """Logits (B, T, vocab) and the head's per-logit sum of |h_c * wte[v, c]|, in float64."""
    b, t = ids.shape
    x = w["wte.weight"][ids] + w["wpe.weight"][np.arange(t)][None]
    c = x.shape[-1]
    d = c // heads
    causal = np.tril(np.ones((t, t), dtype=bool))
    for i in range(layers):
        h = f"h.{i}."
        a = layer_norm(x, w[h + "ln_1.weight"], w[h + "ln_1.bias"])
        qkv = a @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]  # (B, T, 3C)
        q, k, v = (qkv[..., j * c:(j + 1) * c].reshape(b, t, heads, d).transpose(0, 2, 1, 3)
                   for j in range(3))  # (B, H, T, D)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
        scores = np.where(causal, scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        y = (p @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
        x = x + y @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        m = layer_norm(x, w[h + "ln_2.weight"], w[h + "ln_2.bias"])
        m = gelu_new(m @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"])
        x = x + m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    return x @ w["wte.weight"].T, np.abs(x) @ np.abs(w["wte.weight"]).T


# ---- folders ----

def config_json(**changes):
    c = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": VOCAB,
         "n_positions": POSITIONS, "n_ctx": POSITIONS, "n_embd": EMBD, "n_layer": LAYERS,
         "n_head": HEADS, "n_inner": None, "activation_function": "gelu_new",
         "layer_norm_epsilon": EPS, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
         "initializer_range": 0.02, "scale_attn_weights": True, "use_cache": True,
         "bos_token_id": VOCAB - 1, "eos_token_id": VOCAB - 1, "torch_dtype": "float32"}
    c.update(changes)
    return c


def write_folder(folder, weights, dtype="F32", prefix="", shards=1, buffers=False,
                 head=False, config=None, dtypes=None):
    """Writes config.json and the weights; returns the weights as stored (float64)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config or config_json(), f, indent=2)
    stored, entries = {}, []
    for name, value in weights.items():
        data, as_stored = encode(np.asarray(value), (dtypes or {}).get(name, dtype))
        stored[name] = as_stored
        entries.append((prefix + name, (dtypes or {}).get(name, dtype), np.shape(value), data))
        if buffers and name.endswith("attn.c_proj.bias"):
            layer = name[:-len("attn.c_proj.bias")]
            mask = np.tril(np.ones((POSITIONS, POSITIONS), dtype=np.float32))
            entries.append((prefix + layer + "attn.bias", "F32", (1, 1, POSITIONS, POSITIONS),
                            mask.tobytes()))
            entries.append((prefix + layer + "attn.masked_bias", "F32", (),
                            np.float32(-1e4).tobytes()))
    if head:
        wte = [e for e in entries if e[0] == prefix + "wte.weight"][0]
        entries.append(("lm_head.weight", wte[1], wte[2], wte[3]))
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), entries, {"format": "pt"})
        return stored
    per = (len(entries) + shards - 1) // shards
    weight_map, total = {}, 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = entries[s * per:(s + 1) * per]
        write_safetensors(os.path.join(folder, name), part, {"format": "pt"})
        for e in part:
            weight_map[e[0]] = name
            total += len(e[3])
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return stored


def write_reference(folder, stored, rng):
    ids = rng.integers(0, VOCAB, (BATCH, TOKENS))
    logits, head_abs = gpt2_forward(stored, ids)
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump({"ids": ids.tolist(), "shape": list(logits.shape),
                   "logits": logits.ravel().tolist(), "head_abs_sum": head_abs.ravel().tolist()},
                  f)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    rng = np.random.default_rng(20240607)
    weights = random_weights(rng)

    good = {
        "gpt2_f32": dict(dtype="F32", buffers=True),
        "gpt2_bf16": dict(dtype="BF16", prefix="transformer.", head=True),
        "gpt2_f16_sharded": dict(dtype="F16", prefix="transformer.", shards=3),
    }
    for name, options in good.items():
        folder = os.path.join(out, name)
        write_reference(folder, write_folder(folder, weights, **options), rng)
    # An MLP narrower than 4 * n_embd (n_inner).
    folder = os.path.join(out, "gpt2_n_inner")
    stored = write_folder(folder, random_weights(rng, inner=INNER),
                          config=config_json(n_inner=INNER))
    write_reference(folder, stored, rng)

    def without(name):
        return {k: v for k, v in weights.items() if k != name}

    bad = {
        "bad_architecture": dict(config=config_json(architectures=["BertForMaskedLM"],
                                                    model_type="bert")),
        "bad_activation": dict(config=config_json(activation_function="gelu")),
        "bad_missing": dict(weights=without("h.1.mlp.c_fc.bias")),
        "bad_extra": dict(weights={**weights, "h.0.attn.q_norm.weight": np.ones(EMBD)}),
        "bad_misshapen": dict(weights={**weights,
                                       "h.0.attn.c_attn.weight": np.zeros((EMBD, 3 * EMBD - 1))}),
        "bad_config_shape": dict(config=config_json(n_embd=48)),
        "bad_dtype": dict(dtypes={"h.1.ln_2.weight": "I32"}),
        "bad_f64": dict(dtypes={"ln_f.bias": "F64"}),
        "bad_truncated": dict(shards=3),
        "bad_index_missing_file": dict(shards=3),
        "bad_no_weights": dict(),
    }
    for name, options in bad.items():
        folder = os.path.join(out, name)
        w = options.pop("weights", weights)
        write_folder(folder, w, **options)
    # Faults made after writing.
    untied = os.path.join(out, "bad_untied_head")
    write_folder(untied, {**weights}, head=False)
    head = bf16_value(bf16_bits(weights["wte.weight"].astype(np.float32) + 0.5))
    entries = [(k, "F32", np.shape(v), np.asarray(v, dtype=np.float32).tobytes())
               for k, v in weights.items()]
    entries.append(("lm_head.weight", "F32", head.shape, head.astype(np.float32).tobytes()))
    write_safetensors(os.path.join(untied, "model.safetensors"), entries, {"format": "pt"})
    truncated = os.path.join(out, "bad_truncated", "model-00002-of-00003.safetensors")
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) - 100)
    os.remove(os.path.join(out, "bad_index_missing_file", "model-00003-of-00003.safetensors"))
    os.remove(os.path.join(out, "bad_no_weights", "model.safetensors"))


if __name__ == "__main__":
    main()
