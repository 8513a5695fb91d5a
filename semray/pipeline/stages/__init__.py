"""The physical plan: frozen stage values that lowering makes and ``pipeline/ray`` runs; no Ray here."""
