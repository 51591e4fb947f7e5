// The (row, column) of a grid-stride loop's element over rows of `cols` elements, advanced by the
// loop's stride with an add and a compare: one divide per thread instead of one per element
// (64-bit division is a long instruction sequence on a GPU; 32-bit indices where the launch's
// sizes allow make the rest cheaper too). Shared so the host tests can walk it against i / cols
// and i % cols.
#pragma once

#include <cstdint>

#include "runtime/macros.h"

namespace octet::math {

// I: the loop's index type (int64_t, or uint32_t when every index and index + stride fits).
template <typename I>
struct BasicGridRowCol {
  I row, col;  // of the current element
  I step_row, step_col;
  I cols;

  // Element `first` of a loop that moves `stride` elements a step; cols > 0.
  OCTET_HD static BasicGridRowCol start(I first, I stride, I cols) {
    BasicGridRowCol g;
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

using GridRowCol = BasicGridRowCol<int64_t>;

}  // namespace octet::math
