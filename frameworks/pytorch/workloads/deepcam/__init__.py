"""deepcam in pytorch: backend (hooks of the framework's template) and model."""
