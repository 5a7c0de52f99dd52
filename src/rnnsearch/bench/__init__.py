"""Benchmarks (not part of the default run): training and decoding speed, memory, utilisation, data throughput,
and the side-by-side measurement with JoeyNMT."""
