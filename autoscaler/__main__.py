"""``python -m autoscaler`` is the ``ci-autoscaler`` command."""

from autoscaler.cli import main

raise SystemExit(main())
