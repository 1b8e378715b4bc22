"""Simulation: the demo's fleet and workloads (moto, fake GitHub), AWS fault injection, and
``simulate``'s pure replay of a job trace (virtual clock, emulated fleet, peer policies)."""
