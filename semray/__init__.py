"""semray: analytical queries with relational and semantic operators on Ray."""
