"""Runs made at plan time, before the plan lowers: SemCode's code written and checked, the choice
between a model and validated code, and the checked factorization of a semantic join."""
