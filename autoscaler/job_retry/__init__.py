"""Jobs lost to infrastructure: their run brought back once, and only those runs.

``model`` holds the values (a completed job as GitHub reports it, a completed run attempt,
what happened to an instance), ``classify`` the pure verdicts (per job: infrastructure or
the job's own failure, with the evidence; per run: every failure lost and every cancel
caused by the loss, or why not), ``decide`` the pure, bounded decision per run attempt over
a persisted ``ledger``; ``stage`` is the tick's glue around the ports (the GitHub adapter,
the state store); ``interruptions`` turns EC2 events into instance facts and actions.
"""
