"""nkilib.core.attention"""
