"""CosmoFlow in PyTorch: ``backend`` (the hooks of ``sciperf_pytorch.backend``) and
``model`` (the network, built from the spec's ModelSpec)."""
