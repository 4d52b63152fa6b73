"""``skiplock demo``: the three dequeue patterns side by side, then skiplock at work."""
