"""mlp_block: the Transformer MLP block (pre-LayerNorm), its spec, every implementation and its tests."""
