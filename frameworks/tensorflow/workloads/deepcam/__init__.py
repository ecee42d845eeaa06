"""DeepCAM in TensorFlow: ``backend`` (the hooks of ``sciperf_tensorflow.backend``) and
``model`` (the network, built from the spec's ModelSpec)."""
