"""Steps of `accelport demo`, one module per workflow step (stepNN_<what>.py), run in name order."""
