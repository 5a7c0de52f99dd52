"""Stage 6: greedy and beam search over a model's `step`, and translation of the test set or a user's text."""
