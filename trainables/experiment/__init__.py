"""What every layer shares about an experiment: where it is stored, the records it keeps, the selection rules of its
tables, and confidence over seeds."""
