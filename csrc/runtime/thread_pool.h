// One host thread pool shared by every stream worker for intra-op parallelism. Sized to the
// host (hardware_concurrency - 1 helpers; the calling thread also works), so several busy
// streams never oversubscribe the CPU. Nested calls from inside a parallel region run inline.
// Thread-safety: parallel_for may be called concurrently from any threads.
#pragma once

#include <cstdint>
#include <functional>

namespace neuron::rt {

// Number of threads that can work on one parallel_for (helpers + caller).
int num_threads();

// Calls fn(chunk_begin, chunk_end) over [begin, end) in chunks of at least `grain`
// elements, in parallel when the range is large enough. Returns when all chunks are done;
// rethrows the first exception a chunk threw.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

// True while the current thread executes inside parallel_for.
bool in_parallel_region();

// Calls fn(i) for every i in [0, n), all at the same time, each on its own thread (the caller
// runs fn(0); the others run on threads kept for reuse between calls): for work whose parts wait on each other, which a parallel_for may run one after
// the other. Every part runs as a parallel region (nested parallel_for runs inline, so n parts
// keep to n host threads). Returns when all parts are done; rethrows the exception of the
// lowest part that threw.
void run_concurrently(int n, const std::function<void(int)>& fn);

}  // namespace neuron::rt
