"""nkilib.core.mlp.mlp_tkg: the token-generation MLP and its SBUF building blocks."""
