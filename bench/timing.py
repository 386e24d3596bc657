"""Timing shared by the benchmarks that time in-process peers."""
import time


def median_p90(fn, runs, warmup=3):
    """(median, p90) milliseconds of `runs` calls of `fn` after `warmup`."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[len(samples) * 9 // 10]
