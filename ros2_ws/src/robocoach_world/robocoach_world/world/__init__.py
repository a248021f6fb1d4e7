"""CoachWorld: the action-conditioned world model (model, action representation, data, training, eval)."""
