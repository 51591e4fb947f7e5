#!/usr/bin/python3
"""Random-weight GPT-2 and Llama folders in Hugging Face's layout, with reference logits, for
octet's tests.

usage: hf_reference.py OUT_DIR

Writes, under OUT_DIR:
  gpt2_f32/          F32, names without a prefix, the attention-mask buffers real files carry
  gpt2_bf16/         BF16, "transformer." names, a tied lm_head.weight equal to wte
  gpt2_f16_sharded/  F16, "transformer." names, three shards and model.safetensors.index.json
  gpt2_n_inner/      F32, an MLP of width n_inner = 48 instead of 4 * n_embd
  llama_*/          LlamaForCausalLM folders (see LLAMA below): grouped-query attention,
                    rope_theta 10000 and 500000, tied and untied heads, F32/BF16/F16, sharded
  bad_*/             folders octet must refuse, one fault each (see BAD below)
Each good folder also holds reference.json: token ids (B, T), the logits (B, T, vocab) of the
architecture's forward in float64 on the weights as stored (bf16 and f16 values decoded exactly),
and per logit the sum over the LM head's dot product of |h_c * head[v, c]|, the scale of its f32
rounding error.

The forward is GPT2LMHeadModel's, written from the architecture: token + position embeddings;
per layer x += c_proj(attn(ln_1(x))), x += mlp(ln_2(x)) with Conv1D layers (y = x @ W + b,
W stored (in, out)), c_attn's output split as (q, k, v) each (heads, head size), causal softmax
attention scaled by 1/sqrt(head size), GELU in its tanh form (gelu_new); ln_f; logits = x @ wte^T.

The Llama forward is LlamaForCausalLM's (rope_scaling null): token embedding; per layer
x += o_proj(attn(input_layernorm(x))), x += down_proj(silu(gate_proj(m)) * up_proj(m)) with
m = post_attention_layernorm(x), Linear layers y = x @ W^T without biases, RMSNorm
x / sqrt(mean(x^2) + eps) * w; q and k rotated at position p by rotate_half with
inv_freq = 1 / theta^(arange(0, D, 2) / D) (q * cos + rotate_half(q) * sin, cos and sin of
p * inv_freq repeated twice); key/value head j serves query heads j * rep .. (j + 1) * rep - 1
(repeat_kv); causal softmax scaled by 1/sqrt(D); norm; logits = x @ lm_head^T (embed_tokens when
tied). Needs only numpy (Debian: python3-numpy).
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

# ---- Llama ----

LLAMA_HEADS, LLAMA_KV_HEADS, LLAMA_INTERMEDIATE = 4, 2, 64


def llama_random_weights(rng, kv_heads=LLAMA_KV_HEADS, tied=False, layers=LAYERS, embd=EMBD,
                         heads=LLAMA_HEADS, inter=LLAMA_INTERMEDIATE):
    """LlamaForCausalLM's parameters by Hugging Face name without "model." (lm_head.weight,
    which never has it, only when untied); Linear weights (out, in)."""
    d = embd // heads
    w = {"embed_tokens.weight": rng.normal(0, 0.3, (VOCAB, embd))}
    for i in range(layers):
        h = f"layers.{i}."
        w[h + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, embd)
        w[h + "self_attn.q_proj.weight"] = rng.normal(0, 0.2, (heads * d, embd))
        w[h + "self_attn.k_proj.weight"] = rng.normal(0, 0.2, (kv_heads * d, embd))
        w[h + "self_attn.v_proj.weight"] = rng.normal(0, 0.2, (kv_heads * d, embd))
        w[h + "self_attn.o_proj.weight"] = rng.normal(0, 0.2, (embd, heads * d))
        w[h + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, embd)
        w[h + "mlp.gate_proj.weight"] = rng.normal(0, 0.2, (inter, embd))
        w[h + "mlp.up_proj.weight"] = rng.normal(0, 0.2, (inter, embd))
        w[h + "mlp.down_proj.weight"] = rng.normal(0, 0.1, (embd, inter))
    w["norm.weight"] = 1 + rng.normal(0, 0.1, embd)
    if not tied:
        w["lm_head.weight"] = rng.normal(0, 0.3, (VOCAB, embd))
    return w


def rms_norm(x, w, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def llama_forward(w, ids, config):
    """Logits (B, T, vocab) and the head's per-logit sum of |h_c * head[v, c]|, in float64."""
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    eps, theta = config["rms_norm_eps"], config["rope_theta"]
    b, t = ids.shape
    x = w["embed_tokens.weight"][ids]
    c = x.shape[-1]
    d, rep = c // heads, heads // kv_heads
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)  # (D/2,)
    freqs = np.arange(t, dtype=np.float64)[:, None] * inv_freq[None]  # (T, D/2)
    emb = np.concatenate([freqs, freqs], axis=-1)  # (T, D)
    cos, sin = np.cos(emb), np.sin(emb)
    causal = np.tril(np.ones((t, t), dtype=bool))

    def split(y, n):  # (B, T, n * D) -> (B, n, T, D)
        return y.reshape(b, t, n, d).transpose(0, 2, 1, 3)

    for i in range(config["num_hidden_layers"]):
        h = f"layers.{i}."
        a = rms_norm(x, w[h + "input_layernorm.weight"], eps)
        q = split(a @ w[h + "self_attn.q_proj.weight"].T, heads)
        k = split(a @ w[h + "self_attn.k_proj.weight"].T, kv_heads)
        v = split(a @ w[h + "self_attn.v_proj.weight"].T, kv_heads)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # repeat_kv
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
        scores = np.where(causal, scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        y = (p @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
        x = x + y @ w[h + "self_attn.o_proj.weight"].T
        m = rms_norm(x, w[h + "post_attention_layernorm.weight"], eps)
        gate = m @ w[h + "mlp.gate_proj.weight"].T
        up = m @ w[h + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[h + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["norm.weight"], eps)
    head = w.get("lm_head.weight", w["embed_tokens.weight"])
    return x @ head.T, np.abs(x) @ np.abs(head).T


def llama_config_json(**changes):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB,
         "hidden_size": EMBD, "intermediate_size": LLAMA_INTERMEDIATE,
         "num_hidden_layers": LAYERS, "num_attention_heads": LLAMA_HEADS,
         "num_key_value_heads": LLAMA_KV_HEADS, "hidden_act": "silu",
         "max_position_embeddings": POSITIONS, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
         "use_cache": True, "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2,
         "pretraining_tp": 1, "tie_word_embeddings": False, "rope_theta": 10000.0,
         "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
         "mlp_bias": False, "torch_dtype": "float32"}
    c.update(changes)
    return c


def write_llama_folder(folder, weights, config, dtype="F32", prefix="model.", shards=1,
                       buffers=False, head_copy=False):
    """A Llama folder: "model." names, lm_head.weight unprefixed; `buffers` adds the
    rotary_emb.inv_freq buffers older files carry, `head_copy` an lm_head equal to the embedding
    (a tied model saved with its head). Returns the weights as stored (float64)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    stored, entries = {}, []
    for name, value in weights.items():
        data, as_stored = encode(np.asarray(value), dtype)
        stored[name] = as_stored
        full = name if name == "lm_head.weight" else prefix + name
        entries.append((full, dtype, np.shape(value), data))
        if buffers and name.endswith("input_layernorm.weight"):
            d = config["hidden_size"] // config["num_attention_heads"]
            inv = (1.0 / config["rope_theta"] ** (np.arange(0, d, 2) / d)).astype(np.float32)
            layer = name[:-len("input_layernorm.weight")]
            entries.append((prefix + layer + "self_attn.rotary_emb.inv_freq", "F32", inv.shape,
                            inv.tobytes()))
    if head_copy:
        embed = [e for e in entries if e[0] == prefix + "embed_tokens.weight"][0]
        entries.append(("lm_head.weight", embed[1], embed[2], embed[3]))
    write_entries(folder, entries, shards)
    return stored


def write_llama_reference(folder, stored, config, rng):
    ids = rng.integers(0, VOCAB, (BATCH, TOKENS))
    logits, head_abs = llama_forward(stored, ids, config)
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump({"ids": ids.tolist(), "shape": list(logits.shape),
                   "logits": logits.ravel().tolist(), "head_abs_sum": head_abs.ravel().tolist()},
                  f)


# LLAMA: name -> (config changes, weight options, folder options).
LLAMA = {
    # GQA (4 query heads, 2 key/value heads), untied, rope_theta 10000, inv_freq buffers.
    "llama_f32": ({}, {}, dict(buffers=True)),
    # Tied (no lm_head in the file), rope_theta 500000, rms_norm_eps 1e-5, no prefix.
    "llama_bf16_tied": (dict(tie_word_embeddings=True, rope_theta=500000.0, rms_norm_eps=1e-5),
                        dict(tied=True), dict(dtype="BF16", prefix="")),
    # Untied, rope_theta 500000, three shards.
    "llama_f16_sharded": (dict(rope_theta=500000.0), {}, dict(dtype="F16", shards=3)),
    # One key/value head for all four (multi-query), tied with the head saved beside it.
    "llama_mqa_tied": (dict(num_key_value_heads=1, tie_word_embeddings=True),
                       dict(kv_heads=1, tied=True), dict(head_copy=True)),
}


def write_llama_folders(out, rng):
    for name, (changes, weight_options, folder_options) in LLAMA.items():
        folder = os.path.join(out, name)
        config = llama_config_json(**changes)
        stored = write_llama_folder(folder, llama_random_weights(rng, **weight_options), config,
                                    **folder_options)
        write_llama_reference(folder, stored, config, rng)

    weights = llama_random_weights(rng)
    bad_config = {
        "bad_llama_rope_scaling": dict(rope_scaling={"rope_type": "linear", "factor": 2.0}),
        "bad_llama_attention_bias": dict(attention_bias=True),
        "bad_llama_head_dim": dict(head_dim=16),
        "bad_llama_kv_heads": dict(num_key_value_heads=3),
        "bad_llama_hidden_act": dict(hidden_act="gelu"),
    }
    for name, changes in bad_config.items():
        write_llama_folder(os.path.join(out, name), weights, llama_config_json(**changes))
    bad_weights = {
        "bad_llama_missing_k_proj": {k: v for k, v in weights.items()
                                     if k != "layers.1.self_attn.k_proj.weight"},
        "bad_llama_gate_shape": {**weights, "layers.0.mlp.gate_proj.weight":
                                 np.zeros((LLAMA_INTERMEDIATE - 1, EMBD))},
        "bad_llama_missing_head": {k: v for k, v in weights.items() if k != "lm_head.weight"},
    }
    for name, w in bad_weights.items():
        write_llama_folder(os.path.join(out, name), w, llama_config_json())
    # Tied in config.json, but the stored head is not the embedding.
    write_llama_folder(os.path.join(out, "bad_llama_tied_head_differs"), weights,
                       llama_config_json(tie_word_embeddings=True))


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
    write_entries(folder, entries, shards)
    return stored


def write_entries(folder, entries, shards):
    """model.safetensors, or `shards` files and model.safetensors.index.json."""
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), entries, {"format": "pt"})
        return
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

    write_llama_folders(out, np.random.default_rng(20240611))


if __name__ == "__main__":
    main()
