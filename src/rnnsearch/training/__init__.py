"""Stage 5 (App. B.2): the training loop, its resumable state, validation and model selection."""
