"""What operators see: status, health verdicts, checks, expectations."""
