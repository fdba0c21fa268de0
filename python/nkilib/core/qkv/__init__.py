"""nkilib.core.qkv"""
