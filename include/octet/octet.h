// octet's public API in one include: `#include "octet/octet.h"`. Tensors and FP8 formats
// (runtime), the operations on them (kernels: ops, nn, optimizers, quantized tensors and their
// formats), autograd, the FP8 modules and GPT (modules), datasets (data), and the training loop
// with evaluation and checkpoints (train). The backends' internals (kernels/cpu, kernels/cuda) and
// the command-line layer are not part of it and are not installed.
#pragma once

// runtime: tensors, dtypes and FP8 numbers, devices and memory accounting, recipes, checkpoints.
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/float8_tensor.h"
#include "runtime/fp8.h"
#include "runtime/fp8_meta.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/mxfp8_tensor.h"
#include "runtime/parallel.h"
#include "runtime/quantized_tensor.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

// kernels: the operations.
#include "kernels/nn.h"
#include "kernels/ops.h"
#include "kernels/optim.h"
#include "kernels/quantized.h"
#include "kernels/quantized_format.h"
#include "kernels/quantizer.h"

// autograd: the tape, grad modes and differentiable functions.
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/nn.h"
#include "autograd/ops/shape.h"
#include "autograd/variable.h"

// modules: FP8 modules, GPT, optimizers, the FP8 scope.
#include "modules/fp8_autocast.h"
#include "modules/gpt.h"
#include "modules/layernorm_mlp.h"
#include "modules/linear.h"
#include "modules/module.h"
#include "modules/norm.h"
#include "modules/optimizer.h"

// data: built-in tasks, text files and llm.c token shards as batches of token ids; byte-level
// BPE tokenizers.
#include "data/bpe_tokenizer.h"
#include "data/dataset.h"
#include "data/task_data.h"
#include "data/token_data.h"
#include "data/tokenizer.h"

// train: the training loop (Trainer::fit), evaluation, checkpoints, Hugging Face folders, FP8
// health.
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/fit.h"
#include "train/fp8_health.h"
#include "train/hf_checkpoint.h"
#include "train/trainer.h"
