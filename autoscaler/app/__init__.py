"""The application shell: CLI, the service loop, the HTTP status server, wiring of real
adapters, reports for people and programs, and the self-contained demo."""
