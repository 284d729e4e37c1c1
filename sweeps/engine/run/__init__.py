"""Launch, fit and resume: the shared pieces around each script's `Tuner`, pre-flight checks, progress, notifications,
the end of a sweep and how its process exits."""
