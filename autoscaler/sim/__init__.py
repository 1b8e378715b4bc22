"""Simulation: virtual clock, fleet emulator, workloads."""
