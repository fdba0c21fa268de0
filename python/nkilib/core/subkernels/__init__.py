"""nkilib.core.subkernels"""
