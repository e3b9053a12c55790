"""ember.quant."""
