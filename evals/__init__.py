"""ember.evals."""
