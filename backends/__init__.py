"""ember.backends."""
