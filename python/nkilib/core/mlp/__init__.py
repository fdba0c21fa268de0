"""nkilib.core.mlp"""
