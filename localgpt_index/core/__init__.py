"""The lowest layer: errors and exit codes, value types, files, CPUs, failpoints; no other package below it."""
