"""Cloud runner pools behind the RunnerPool port (EC2 Auto Scaling today)."""
