// Compiled by the layering tests: must fail against the runtime layer's include root (runtime
// may not use kernels) and compile against the kernels layer's root (the control).
#include "kernels/ops.h"

int main() { return 0; }
