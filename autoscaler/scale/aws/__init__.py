"""EC2 Auto Scaling behind the ``RunnerPool`` port (boto3): ``asg`` and its error table
``errors`` (botocore error codes -> the error tree)."""
