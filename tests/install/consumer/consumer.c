/* tests/install/consumer/consumer.c: the C API from an installed tidepool, compiled as C (built
 * by the consumer project with find_package, and by check_install.py with pkg-config alone).
 * Run with TIDEPOOL_DEVICE=sim; prints one "key value" line per figure, exits 1 on a surprise. */
#include <stdio.h>

#include <tidepool/c_api.h>

int main(void) {
  void* p = NULL;
  tidepool_stats_t stats = {0};
  size_t released = 0;
  stats.struct_size = sizeof stats;
  if (tidepool_allocate(1 << 20, 0, NULL, TIDEPOOL_SCRATCH, &p) != TIDEPOOL_SUCCESS) {
    fprintf(stderr, "allocate: %s\n", tidepool_last_error());
    return 1;
  }
  if (tidepool_deallocate(p, 0, NULL) != TIDEPOOL_SUCCESS) return 1;
  if (tidepool_deallocate(p, 0, NULL) != TIDEPOOL_DOUBLE_FREE) return 1; /* refused, pool kept */
  if (tidepool_stats(0, &stats) != TIDEPOOL_SUCCESS) return 1;
  if (tidepool_release(0, &released) != TIDEPOOL_SUCCESS) return 1;
  printf("version %s\nallocations %llu\nlive %llu\nreleased %zu\n", tidepool_version(),
         (unsigned long long)stats.allocations, (unsigned long long)stats.live_allocations, released);
  return stats.allocations == 1 && stats.live_allocations == 0 && released > 0 ? 0 : 1;
}
