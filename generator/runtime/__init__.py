"""The hand-written PyTorch layer: input checks, dispatch to generated modules, custom op."""
