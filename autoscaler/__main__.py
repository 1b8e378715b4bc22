"""``python -m autoscaler`` is the ``ci-autoscaler`` command."""

from autoscaler.app.cli import main

raise SystemExit(main())
