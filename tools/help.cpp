// The help texts of the `octet` program.
#include <string>
#include <string_view>

#include "runtime/error.h"
#include "tools/commands.h"

namespace octet::cli {
namespace {

constexpr const char* kOverviewHelp =
    R"(usage: octet <command> [options]      (octet <command> --help for its options)

FP8 training and inference for small GPT models on the CPU (and CUDA where present).

commands:
  train      train a GPT from a JSON config (no arguments: the built-in default run,
             a 2-layer GPT sorting 6 digits under FP8 delayed scaling)
  eval       held-out accuracy / bits per byte / loss of a checkpoint
  generate   continue a prompt with a checkpoint, in inference mode
  tokenize   text files as an llm.c token shard, through a byte-level BPE tokenizer
  bench      time f32 and each FP8 recipe: GEMMs, layers, a model
  inspect    what a checkpoint holds: tensors, FP8 metas, bytes by usage, config
  import     a Hugging Face model folder (GPT2LMHeadModel, LlamaForCausalLM) as a checkpoint
  export     a checkpoint as a Hugging Face model folder that transformers loads

options of every command:
  --threads N        CPU threads (default: the machine's cores; train: training.threads)
  --log-level LEVEL  trace, debug, info (default), warn, error, critical or off

examples:
  octet train
  octet train --set training.steps=500 --out runs/short
  octet train --resume --out runs/short --set training.steps=1000
  octet eval --checkpoint runs/default/checkpoint.safetensors
  octet generate --checkpoint runs/default/checkpoint.safetensors --prompt 931275'>'
  octet train --set data.kind=text --set data.path=input.txt --set data.tokenizer=gpt2/ \
              --set model.seq_len=256 --out runs/text
  octet generate --checkpoint runs/text/checkpoint.safetensors --prompt 'Once upon a time'
  octet tokenize --tokenizer gpt2/ --out train.bin input.txt
  octet inspect runs/default/checkpoint.safetensors
  octet import hf/gpt2 --out gpt2.safetensors
  octet generate --checkpoint gpt2.safetensors --prompt-ids 464,2068,7586
  octet train --init gpt2.safetensors --config run.json --out runs/tuned
  octet export runs/tuned/checkpoint.safetensors --to hf/gpt2-tuned
)";

constexpr const char* kTrainHelp =
    R"(usage: octet train [--config FILE] [--set key=value ...] [--out DIR] [--init SOURCE] [--resume | --overwrite] [--quiet]

Trains a GPT as the config says: built-in defaults (configs/train/default.json), then FILE,
then each --set (a dotted key, e.g. --set optimizer.lr=1e-3; every key: configs/README.md).

  --config FILE     a JSON run config (an object of sections; // comments allowed)
  --set key=value   override one key; repeatable; the value is JSON or a bare string
  --out DIR         the run directory (output.dir): config.json, metrics.jsonl, loss.svg,
                    checkpoint.safetensors
  --init SOURCE     start a new run from the weights of SOURCE, a checkpoint or a Hugging Face
                    folder: its model.* keys are the run's (a file or --set that gives one
                    must agree); any recipe, FP8 primary weights quantized from the weights
  --resume          continue exactly from DIR/checkpoint.safetensors; without --config the
                    run's saved config is used (extend it with --set training.steps=N)
  --overwrite       start a new run in a DIR that holds one, replacing it (without --resume
                    or --overwrite such a DIR is refused, so no finished run is lost)
  --quiet           print only the closing summary

A terminal gets a live progress line; otherwise plain lines now and then.

Data parallel: mpirun -np N octet train ... trains on N ranks, each with training.batch_size
sequences of every global batch (training.zero_stage=1 shards the optimizer state); rank 0
prints and writes DIR. A resume may use another N.
)";

constexpr const char* kEvalHelp =
    R"(usage: octet eval --checkpoint PATH [--data FILE] [--examples N] [--set key=value ...] [--json]

Evaluates a checkpoint on held-out data in inference mode: exact-match accuracy of greedy answers
(built-in task), bits per byte (text as bytes) or loss per token (text through a tokenizer,
token shards). A checkpoint's tokenizer is its own: data.tokenizer need not exist any more.

  --checkpoint PATH  a checkpoint written by octet train
  --data FILE        other text / shard data than the run's (same vocabulary): its held-out
                     tail, or all of it for a shard run trained with data.val_path
  --examples N       held-out problems to generate (task; default training.eval_examples)
  --set key=value    override data.* or training.eval_* keys of the saved config; fp8.* too
                     for a checkpoint of high-precision weights (fp8.enabled=false: an
                     imported model), e.g. --set fp8.enabled=true --set fp8.recipe=...
  --json             one JSON object instead of a sentence
)";

constexpr const char* kGenerateHelp =
    R"(usage: octet generate --checkpoint PATH (--prompt TEXT | --prompt-ids IDS) [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--eos-id ID|none] [--seed S] [--no-cache] [--set key=value ...]

Continues TEXT with the checkpoint's model in inference mode: FP8 weights row-wise only, no
column-wise data, no optimizer state, no saved tensors. The prompt goes through the model in one
pass, then each new token is one position over a key/value cache (past the model's context the
window of its last model.seq_len tokens slides, and each later token re-runs it). Ends with a
one-line memory summary, the cache's bytes included (on stderr).

  --checkpoint PATH    a checkpoint written by octet train or octet import
  --prompt TEXT        in the data's alphabet (task: digits and '>' or '+', '='; text: UTF-8,
                       through the tokenizer the checkpoint carries: bytes, or the BPE of
                       data.tokenizer; no data file is read); prints the prompt and the
                       decoded continuation
  --prompt-ids IDS     token ids instead, such as 1,2,3 (for a model without a tokenizer);
                       prints the generated ids, comma-separated, on one line
  --set key=value      as for eval: fp8.* of a high-precision checkpoint runs it under a
                       recipe (current, mxfp8, blockwise, nvfp4 scale from the tensors; delayed
                       keeps its initial scales, as no amax is recorded in inference)
  --max-new-tokens N   tokens to add (default: the task's answer length, else 64)
  --temperature T      0 (default): greedy; > 0: sample from softmax(logits / T)
  --top-k K            sample among the K most likely tokens only (0, the default: all)
  --top-p P            sample among the fewest most likely tokens whose probability reaches P
                       (1, the default: all)
  --eos-id ID|none     stop at this token id (default: the tokenizer's end-of-text id, if any);
                       it and what would follow are not printed
  --seed S             the sampling stream (default 0)
  --no-cache           re-run the whole window for every token (the cache's reference)
)";

constexpr const char* kTokenizeHelp =
    R"(usage: octet tokenize --tokenizer PATH --out SHARD TEXT...

Encodes the UTF-8 text files TEXT... with a byte-level BPE tokenizer and writes their tokens,
one file after the other, as one llm.c token shard (uint16 ids; train on it with
data.kind=shards, and give data.tokenizer=PATH so that checkpoints carry the tokenizer). As
llm.c's preprocessing does, each file starts with the end-of-text token when the tokenizer has
one. The shard is written to a temporary file and renamed into place.

  --tokenizer PATH   a Hugging Face tokenizer.json, or a folder holding tokenizer.json or
                     GPT-2's vocab.json + merges.txt; its vocabulary must fit uint16 (65536)
  --out SHARD        the shard to write (replaced if it exists)
)";

constexpr const char* kInspectHelp = R"(usage: octet inspect PATH [--json]

Shows what a checkpoint holds: every tensor with dtype, shape and bytes; FP8 metas (scale, newest
amax, head of the amax history per slot); bytes by usage (FP8 row-wise / column-wise, master
weights, optimizer state, FP8 metas); the trainer state and the config.

  --json   the same as one JSON document
)";

constexpr const char* kImportHelp = R"(usage: octet import HF_DIR --out FILE

Reads a Hugging Face model folder (config.json and model.safetensors, or the shards that
model.safetensors.index.json lists; F32, BF16 or F16 tensors) of a GPT2LMHeadModel or a
LlamaForCausalLM (grouped-query attention, rotary positions without rope_scaling, no biases) and
writes it as an octet checkpoint: f32 weights, the model.* keys of its config (model.arch,
n_kv_head, rope_theta, ffn_hidden, norm_eps, tie_embeddings, ...), fp8.enabled=false (high
precision until a recipe is chosen: --set on eval and generate, a config or --set on
train --init). A folder it cannot take is one error naming the tensor or key; nothing is written.

  --out FILE   the checkpoint to write (must not exist)
)";

constexpr const char* kExportHelp = R"(usage: octet export FILE --to DIR

Writes the checkpoint FILE as a Hugging Face folder that transformers loads: a GPT2LMHeadModel
(model.arch gpt2) or a LlamaForCausalLM (model.arch llama); config.json and model.safetensors
(F32; FP8 primary weights dequantized). DIR must not exist or be empty; it appears whole or not
at all. A model the architecture cannot express (GPT-2: RMSNorm, no biases, a gated activation,
an untied head; Llama: LayerNorm, biases, an activation other than swiglu) is refused, naming the
config key.

  --to DIR   the folder to write
)";

constexpr const char* kBenchHelp =
    R"(usage: octet bench [gemm|layer|block|model] [--json] [--device cpu|cuda|cuda:N] ...

Times high precision (f32 on the CPU, bf16 on CUDA) and each FP8 recipe: GEMMs, a LayerNormMLP
forward+backward, a transformer layer training step and a small model; prints ms, GFLOP/s,
tokens/s and peak bytes. On CUDA: FP8 against bf16 GEMMs at 8192^3 and GPT-2 layer shapes, and
a layer step at d 4096, 32 heads, seq 2048, batch 2. `octet bench --help` lists every option.

  --json     one JSON object per result (bench, precision, median_ms, gflops, peak_bytes, ...)
  --device   where to run (default cpu)
)";

struct CommandHelp {
  std::string_view command;  // empty: the program's own help
  const char* text;
};

constexpr CommandHelp kCommandHelp[] = {
    {"", kOverviewHelp},         {"train", kTrainHelp},       {"eval", kEvalHelp},
    {"generate", kGenerateHelp}, {"tokenize", kTokenizeHelp}, {"inspect", kInspectHelp},
    {"bench", kBenchHelp},       {"import", kImportHelp},     {"export", kExportHelp},
};

}  // namespace

std::string help_text(std::string_view command) {
  for (const CommandHelp& h : kCommandHelp) {
    if (command == h.command) return h.text;
  }
  OCTET_FAIL("no help for unknown command \"", command,
             "\"; the commands are train, eval, generate, tokenize, bench, inspect, import and "
             "export");
}

}  // namespace octet::cli
