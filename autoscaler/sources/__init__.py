"""CI providers behind the JobSource port (GitHub today)."""
