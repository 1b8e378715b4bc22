"""Alert rules (pure), lifecycle, rendering and delivery."""
