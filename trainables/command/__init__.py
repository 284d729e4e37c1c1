"""The command-trial runtime: a Tune trial that runs the user's own training command (`runner.train_command`): its
process and shim, its output read and parsed, metric sources and trackers, its working folder, and the sweep's
failure gate."""
