"""nkilib.experimental.transformer: attention_block_tkg, transformer_tkg."""
