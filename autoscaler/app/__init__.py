"""The application shell: CLI, the service loop, the served application (the status and
webhook listeners), wiring of real adapters, reports for people and programs, and the
self-contained demo."""
