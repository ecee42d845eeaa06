"""Single-device models; distribution and precision are applied from outside (runtime)."""
