"""Domain operations in transactions; no HTTP types here."""
