"""The generated pages of the docs site, written from the code so they cannot drift.

``python -m docgen`` (``make docs``) writes ``docs/reference/*.md``; ``--check`` only
compares and fails when a page is stale, which ``tests/unit/test_docs_reference.py``
also does. Each module renders one page from one source: the metrics registry, the
alert rules, the CLI's parser, the package tree.
"""
