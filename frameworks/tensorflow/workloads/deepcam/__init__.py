"""deepcam in tensorflow: backend (hooks of the framework's template) and model."""
