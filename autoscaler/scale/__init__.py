"""Scale: the pure decision (``policy`` over ``plan`` values, ``capacity`` failures) and the
``scaler`` that executes it through the ``RunnerPool`` port; ``aws/`` is the EC2 ASG adapter.
"""
