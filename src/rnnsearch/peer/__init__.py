"""The JoeyNMT 2.3.0 experiment: the peer trained and decoded on our data, compared with our models."""
