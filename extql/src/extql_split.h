/*
 * extql_split.h - how a tensor is cut into ranges for threads: the one
 * place of that policy, for both callers of the range kernels.
 *
 *   - extql_quantize / extql_dequantize (the NumPy API): an OpenMP team of
 *     extql's own thread count (extql_threads_for), handing out ranges of
 *     extql_chunk_for(n, threads) elements dynamically.
 *   - The onnxruntime ops: the session's intra-op thread pool, whose size
 *     the op does not know; ranges of extql_chunk_for(n, 0) elements.
 *
 * A range has a fixed cost (a hand-off to a thread, which may have to be
 * woken; for per-axis quantization along the last axis, the periodic scale
 * and zero point), so ranges are made as large as balance allows, and a
 * tensor below the parallel minimum runs on the calling thread: handing it
 * out would cost more than it takes on one core.  The minimums are measured
 * (docs/development.rst, "The onnxruntime shim and the type table"): in
 * one-node sessions of the 2-core machine of those measurements, quiet, a
 * second thread of the pool took 0.64-1.0x one thread's time from 128K
 * elements on and 1.1-1.3x at 64K (int8, int32, float16, both directions):
 * the onnxruntime ops split from 128K elements on.
 * The NumPy API's OpenMP team splits from 64K (two threads took 0.77-1.28x
 * one thread's time at 64K-128K; from 256K on, libgomp's default waiting
 * made them stall for milliseconds on that machine, whatever the split:
 * OMP_WAIT_POLICY=passive avoids it).  Ranges are a
 * multiple of 64 elements (whole cache lines for every element size).  The
 * build may set every threshold (-D) for measurements.
 */
#ifndef EXTQL_SPLIT_H
#define EXTQL_SPLIT_H

#include <stdint.h>

/* Tensors smaller than this run on the calling thread (NumPy API). */
#ifndef EXTQL_PARALLEL_MIN_ELEMENTS
#define EXTQL_PARALLEL_MIN_ELEMENTS (1 << 16)
#endif
/* The same for the onnxruntime ops (a pool hand-off includes a wake-up
   when the pool does not spin). */
#ifndef EXTQL_POOL_MIN_ELEMENTS
#define EXTQL_POOL_MIN_ELEMENTS (1 << 17)
#endif
/* The shortest range, the longest range handed to a pool, and the ranges
   per thread (or for a pool of unknown size) that let the threads balance
   their work. */
#ifndef EXTQL_CHUNK_MIN
#define EXTQL_CHUNK_MIN (1 << 15)
#endif
#ifndef EXTQL_CHUNK_MAX
#define EXTQL_CHUNK_MAX (1 << 18)
#endif
#ifndef EXTQL_CHUNKS_PER_THREAD
#define EXTQL_CHUNKS_PER_THREAD 8
#endif
#ifndef EXTQL_POOL_CHUNKS
#define EXTQL_POOL_CHUNKS 64
#endif

/* How many of `threads` threads to use on n elements: 1 below the
   parallel minimum, and at most one per EXTQL_CHUNK_MIN elements. */
static inline int extql_threads_for(int64_t n, int threads) {
  if (n < EXTQL_PARALLEL_MIN_ELEMENTS || threads <= 1) return 1;
  if (n / EXTQL_CHUNK_MIN < threads) threads = (int)(n / EXTQL_CHUNK_MIN);
  return threads > 1 ? threads : 1;
}

/* The range length for n elements on `threads` threads (0: a pool of
   unknown size); n itself when the tensor runs on the calling thread. */
static inline int64_t extql_chunk_for(int64_t n, int threads) {
  int64_t chunk;
  if (n < (threads > 0 ? EXTQL_PARALLEL_MIN_ELEMENTS : EXTQL_POOL_MIN_ELEMENTS)) return n;
  if (threads > 0) {
    chunk = n / ((int64_t)EXTQL_CHUNKS_PER_THREAD * threads);
  } else {
    /* A pool of unknown size: enough ranges for a large pool too. */
    chunk = n / EXTQL_POOL_CHUNKS;
    if (chunk > EXTQL_CHUNK_MAX) chunk = EXTQL_CHUNK_MAX;
  }
  if (chunk < EXTQL_CHUNK_MIN) chunk = EXTQL_CHUNK_MIN;
  return (chunk + 63) & ~(int64_t)63;
}

#endif /* EXTQL_SPLIT_H */
