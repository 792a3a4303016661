"""check stage: oracles that judge what the pipeline produced."""
