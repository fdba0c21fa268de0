"""nkilib.core.embeddings"""
