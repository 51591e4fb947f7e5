// Thread count of the shared OpenMP pool.
#include "runtime/parallel.h"

#include "runtime/error.h"

namespace octet {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  OCTET_CHECK(n >= 1, "thread count must be at least 1, got ", n);
  omp_set_num_threads(n);
}

}  // namespace octet
