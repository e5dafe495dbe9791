"""What tends a vault: doctor, review, stats, consolidate."""
