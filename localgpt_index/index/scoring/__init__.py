"""Scoring query vectors against page vectors: exact MaxSim (CPU, device), the binary first pass and its reads."""
