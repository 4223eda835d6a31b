"""V-JEPA 2's three-axis rotary embedding (a model's part): see spec.py."""
