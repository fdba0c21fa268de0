"""nkilib.core.rmsnorm"""
