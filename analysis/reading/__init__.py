"""Reading experiments: Ray Tune's files and state, the trial table and history, the driver record and provenance."""
