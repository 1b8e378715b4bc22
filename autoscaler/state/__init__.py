"""State: what must survive a restart or a failover, behind one narrow port (``port``).

Two backends: ``sqlite`` (embedded, the default: one process on one disk, locked against a
second controller) and ``dynamodb`` (one table that several controllers share, with a
leader lease: ``lease`` is the pure logic, ``keeper`` renews it, ``fence`` keeps followers
from acting). ``dynamodb_table`` is the table's schema and the narrowed SDK client.
"""
