"""What tests and benchmarks use: checkpoints, the fake family, power-loss disks (never production code's)."""
