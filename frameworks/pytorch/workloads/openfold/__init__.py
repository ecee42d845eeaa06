"""OpenFold in PyTorch: the reference's AlphaFold2 with the same parameter names and order."""
