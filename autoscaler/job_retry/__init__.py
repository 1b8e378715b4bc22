"""Jobs lost to infrastructure, re-run once and only those.

``model`` holds the values (a completed job as GitHub reports it, what happened to an
instance), ``classify`` the pure verdict (infrastructure or the user's failure, with the
evidence), ``decide`` the pure, bounded re-run decision over a persisted ``ledger``;
``stage`` is the tick's glue around the ports (the GitHub adapter, the state store);
``interruptions`` turns EC2 events into instance facts and actions.
"""
