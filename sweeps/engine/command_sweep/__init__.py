"""What a sweep of the user's own command needs before Ray starts: the template and its checks, `--check`, and the code
snapshot."""
