"""nkilib.core.mlp.mlp_cte: the context-encoding MLP."""
