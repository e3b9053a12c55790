"""ember.runners."""
