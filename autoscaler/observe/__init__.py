"""Observe: what the CI provider shows, turned into the queue per runner type.

``queue`` is the pure math; ``github/`` is the GitHub adapter (httpx) behind ``JobSource``.
"""
