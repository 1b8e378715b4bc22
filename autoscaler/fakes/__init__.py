"""Faithful local fakes of external services, shipped for the demo and the tests."""
