/* fuzz_sim.c: libFuzzer drives the simulation of the loop (tests/sim): the input's bytes make
 * every choice the PRNG would (who connects, what they send, how bytes are split, when workers
 * answer or die, when time passes). A violated invariant aborts, so libFuzzer keeps the input;
 * build/fuzz/fuzz_sim FILE replays it, and tests/sim/sim --seed does the same for PRNG runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sim_opts o = {.seed = 1, .steps = 400, .data = data, .len = size};
    struct sim_result r;
    if (sim_run(&o, &r)) {
        fprintf(stderr, "fuzz_sim: invariant violated at step %ld: %s\n", r.failed_step, r.what);
        abort();
    }
    return 0;
}
