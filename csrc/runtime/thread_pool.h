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

}  // namespace neuron::rt
