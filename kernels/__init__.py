"""A plain PyTorch library: the looped LM, its exit rule and the depth-skipping engine.

Nothing here imports Django; the web apps and the workers call into it.
"""
