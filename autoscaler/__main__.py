"""``python -m autoscaler`` is the ``ci-autoscaler`` command."""

from autoscaler.app.entry import main

raise SystemExit(main())
