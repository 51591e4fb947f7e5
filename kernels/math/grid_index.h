// The (row, column) of a grid-stride loop's element over rows of `cols` elements, advanced by the
// loop's stride with an add and a compare: one 64-bit divide per thread instead of one per
// element (64-bit division is a long instruction sequence on a GPU). Shared so the host tests can
// walk it against i / cols and i % cols.
#pragma once

#include <cstdint>

#include "runtime/macros.h"

namespace octet::math {

struct GridRowCol {
  int64_t row, col;  // of the current element
  int64_t step_row, step_col;
  int64_t cols;

  // Element `first` of a loop that moves `stride` elements a step; cols > 0.
  OCTET_HD static GridRowCol start(int64_t first, int64_t stride, int64_t cols) {
    GridRowCol g;
    g.row = first / cols;
    g.col = first - g.row * cols;
    g.step_row = stride / cols;
    g.step_col = stride - g.step_row * cols;
    g.cols = cols;
    return g;
  }

  // To the element `stride` further on.
  OCTET_HD void advance() {
    row += step_row;
    col += step_col;
    if (col >= cols) {  // step_col < cols, so one wrap at most
      col -= cols;
      ++row;
    }
  }
};

}  // namespace octet::math
