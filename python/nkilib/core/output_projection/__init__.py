"""nkilib.core.output_projection"""
