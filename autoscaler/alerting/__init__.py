"""Alert: pure rules and lifecycle, rendering in the on-call format, the per-tick engine,
delivery to receivers and the SQLite state store with its outbox."""
