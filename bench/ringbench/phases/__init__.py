"""One file per benchmark phase; each is a mixin of ringbench.bench.Bench."""
