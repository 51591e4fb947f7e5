// Uses octet as a library: trains a LayerNormMLP under FP8 delayed scaling with AdamW to map random
// inputs onto fixed random targets, prints the loss per step, and fails unless the loss fell.
#include <cstdio>
#include <exception>

#include "autograd/engine.h"
#include "autograd/ops/arithmetic.h"
#include "modules/fp8_autocast.h"
#include "modules/layernorm_mlp.h"
#include "modules/optimizer.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"

int main() {
  using namespace octet;
  try {
    const int64_t tokens = 64, hidden = 64, ffn = 256;  // FP8 GEMMs: rows % 8, cols % 16
    const Recipe recipe = Recipe::delayed(FP8Format::kHybrid);

    modules::LayerNormMLPOptions options;
    options.linear.recipe = recipe;
    options.linear.seed = 1;
    modules::LayerNormMLP mlp(hidden, ffn, options);
    modules::Optimizer optimizer(mlp.parameters(), modules::OptimizerOptions{});

    Generator gen(7);
    Tensor x = Tensor::empty({tokens, hidden}, DType::kF32);       // (tokens, hidden)
    Tensor target = Tensor::empty({tokens, hidden}, DType::kF32);  // (tokens, hidden)
    gen.fill_normal(x, 0.f, 1.f);
    gen.fill_normal(target, 0.f, 0.5f);

    float first = 0.f, last = 0.f;
    const int steps = 30;
    for (int step = 0; step < steps; ++step) {
      Tensor y;
      {
        // Delayed scaling: the forward scales update when this scope closes.
        modules::FP8Autocast fp8(recipe);
        y = mlp.forward(x);
      }
      const Tensor diff = autograd::sub(y, target);
      const Tensor loss = autograd::mean(autograd::mul(diff, diff));
      autograd::backward(loss);
      optimizer.step(3e-3f);
      optimizer.zero_grad();

      last = loss.item();
      if (step == 0) first = last;
      std::printf("step %2d  loss %.5f\n", step, last);
    }
    if (!(last < 0.8f * first)) {
      std::fprintf(stderr, "loss did not fall: %.5f -> %.5f\n", first, last);
      return 1;
    }
    std::printf("loss fell from %.5f to %.5f\n", first, last);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
