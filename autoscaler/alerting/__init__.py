"""Alert: pure rules and lifecycle, rendering in the on-call format, the per-tick engine,
delivery to receivers (the state they keep, outbox included, is behind the port in
``autoscaler.state``)."""
